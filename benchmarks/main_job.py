"""The main job, timed end to end: ``python scripts/launch_local.py`` with each start method, side by side.

Each repetition runs the launcher once with ``--start_method=fork`` (the
launch starts its own fork server), once with ``--start_method=exec`` and
once forking from the host's fork server (``host``: started before the first
repetition and kept, as a host that runs launches one after another would
have it; its one import is not timed), alternating so that the machine's
noise falls on all alike, default flags otherwise, and takes the wall time from starting
the launcher until it has exited: imports, training, evaluation, summary and
teardown, what a user waits for. Beside it, the CPU seconds (user + system)
of the launcher and every process under it (for ``host``, the launcher's and
the tasks the host's server forked for it): on a machine shared with other
work the wall time depends on how many runnable processes each side has, the
CPU time does not. The load average before and after is kept with the figures.

    python -m benchmarks.main_job 5        # 5 runs per start method; prints the line and the JSON
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import psutil

from benchmarks.cluster_run import ClusterRunError
from ps_toolkit.base.paths import PACKAGE_PARENT
from ps_toolkit.launch import task_plan
from ps_toolkit.process import fork_client, lifecycle

LAUNCH_LOCAL_MODULE = "ps_toolkit.tools.launch_local"
METHODS = ("fork", "exec", "host")


def measure(repetitions: int, timeout_s: float = 300.0, methods: tuple[str, ...] = METHODS) -> dict:
    """{METHOD: {...}, "fork_over_exec": ratio, "host_over_exec": ratio, ...}: wall and CPU seconds of each
    method, median, min, max, every run."""
    walls = {method: [] for method in methods}
    cpus = {method: [] for method in methods}
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="ps_toolkit_bench_host_") as folder:
        host = _start_host_server(os.path.join(folder, "server.sock")) if "host" in methods else None
        try:
            for _ in range(repetitions):
                for method in methods:
                    wall, cpu = run_once(method, timeout_s, host)
                    walls[method].append(wall)
                    cpus[method].append(cpu)
        finally:
            if host is not None:
                fork_client.stop_host_server(host.process)
    summary = {method: {**_summary(walls[method]), "cpu": _summary(cpus[method])} for method in methods}
    for method in methods:
        if method != "exec":
            summary[f"{method}_over_exec"] = round(summary[method]["median"] / summary["exec"]["median"], 2)
            summary[f"cpu_{method}_over_exec"] = round(
                summary[method]["cpu"]["median"] / summary["exec"]["cpu"]["median"], 2
            )
            # The methods of one repetition run back to back, under nearly the same load: the median of their
            # ratios is steadier than the ratio of the medians when the load drifts between repetitions.
            pairs = [one / exec_ for one, exec_ in zip(walls[method], walls["exec"], strict=True)]
            summary[f"{method}_pair_ratio_median"] = round(statistics.median(pairs), 2)
    summary["load_average"] = [round(load_before, 1), round(os.getloadavg()[0], 1)]
    return summary


@dataclasses.dataclass
class HostServer:
    process: subprocess.Popen
    path: str


def _start_host_server(path: str) -> HostServer:
    """The host's fork server under the launches' environment, its imports done before the first timed launch."""
    process = fork_client.start_host_server(path, task_plan.task_env(_launch_env(None)))
    probe = fork_client.ForkServer(task_plan.task_env(_launch_env(path)), address=path)
    try:
        probe.wait_ready()
    except fork_client.ForkUnavailable as err:
        fork_client.stop_host_server(process)
        raise ClusterRunError(f"the host's fork server cannot serve the launches: {err}") from None
    finally:
        probe.close()
    return HostServer(process, path)


def _launch_env(host_path: str | None) -> dict:
    """This process's environment with the host's server named (``host``) or not (``fork``, ``exec``)."""
    env = dict(os.environ)
    env.pop(fork_client.HOST_SERVER_ENV, None)
    if host_path is not None:
        env[fork_client.HOST_SERVER_ENV] = host_path
    return env


def run_once(method: str, timeout_s: float, host: HostServer | None = None) -> tuple[float, float]:
    """Wall and CPU seconds of one launch; ClusterRunError (with its output's tail) if it fails or overruns.

    The CPU is this process's reaped descendants' (getrusage): the launcher reaps
    its tasks and its fork server, the fork server its forked tasks; with
    ``host`` (the host's server, for method ``host``), the tasks it forked and reaped too.
    """
    run_dir = tempfile.mkdtemp(prefix="ps_toolkit_bench_main_")
    start_method = "fork" if method == "host" else method
    argv = [sys.executable, "-m", LAUNCH_LOCAL_MODULE, "--quiet", f"--log_dir={run_dir}"]
    argv.append(f"--start_method={start_method}")
    used_host = host if method == "host" else None
    env = _launch_env(used_host.path if used_host else None)
    try:
        with tempfile.TemporaryFile() as output:
            started, cpu_before = time.monotonic(), _children_cpu(used_host)
            proc = lifecycle.spawn(argv, env=env, stdout=output, stderr=output, cwd=PACKAGE_PARENT)
            try:
                code = proc.wait(timeout=timeout_s)
                seconds = time.monotonic() - started
            except subprocess.TimeoutExpired:
                code = seconds = None
            finally:
                lifecycle.stop_trees([proc], 5.0)
            if code != 0:
                output.seek(0)
                tail = output.read().decode(errors="replace")[-3000:]
                raise ClusterRunError(f"launch_local.py ({method}) ended with {code}:\n{tail}")
        return seconds, _children_cpu(used_host) - cpu_before
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def _children_cpu(host: HostServer | None = None) -> float:
    """CPU seconds of this process's reaped descendants, plus those the host's server reaped."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    seconds = usage.ru_utime + usage.ru_stime
    if host is not None:
        times = psutil.Process(host.process.pid).cpu_times()
        seconds += times.children_user + times.children_system
    return seconds


def _summary(seconds: list[float]) -> dict:
    return {
        "median": round(statistics.median(seconds), 2),
        "min": round(min(seconds), 2),
        "max": round(max(seconds), 2),
        "runs": [round(s, 2) for s in seconds],
    }


def main_job_line(summary: dict) -> str:
    methods = [method for method in METHODS if method in summary]

    def cell(method, figures):
        return f"{method} {figures['median']:.1f} s ({figures['min']:.1f}-{figures['max']:.1f})"

    def ratios(prefix: str) -> str:
        return ", ".join(f"{m}/exec {summary[f'{prefix}{m}_over_exec']:.2f}x" for m in methods if m != "exec")

    walls = ", ".join(cell(method, summary[method]) for method in methods)
    cpus = ", ".join(cell(method, summary[method]["cpu"]) for method in methods)
    pairs = ", ".join(
        f"{m}/exec {summary[f'{m}_pair_ratio_median']:.2f}x" for m in methods if f"{m}_pair_ratio_median" in summary
    )
    runs = len(summary[methods[0]]["runs"])
    load = summary.get("load_average")
    return (
        f"Main job (`python scripts/launch_local.py`), {runs} runs each: wall time {walls}, {ratios('')}"
        + (f" (median of each repetition's own: {pairs})" if pairs else "")
        + f"; CPU time {cpus}, {ratios('cpu_')}"
        + (f"; load average {load[0]:.1f} before, {load[1]:.1f} after" if load else "")
    )


def main(argv: list[str]) -> int:
    text = argv[1] if len(argv) > 1 else "3"
    if len(argv) > 2 or not text.isdigit() or int(text) < 1:
        print(f"main_job: repetitions {text!r} from the command line: give one whole number >= 1", file=sys.stderr)
        return 2
    summary = measure(int(text))
    print(main_job_line(summary))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
