"""The main job, timed end to end: ``python scripts/launch_local.py`` with each start method, side by side.

Each repetition runs the launcher once with ``--start_method=fork`` and once
with ``--start_method=exec`` (alternating, so the machine's noise falls on
both alike), default flags otherwise, and takes the wall time from starting
the launcher until it has exited: imports, training, evaluation, summary and
teardown, what a user waits for. Beside it, the CPU seconds (user + system)
of the launcher and every process under it: on a machine shared with other
work the wall time depends on how many runnable processes each side has, the
CPU time does not. The load average before and after is kept with the figures.

    python -m ps_toolkit.benchmarks.main_job 5        # 5 runs per start method; prints the line and the JSON
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from ps_toolkit.base.paths import PACKAGE_PARENT
from ps_toolkit.benchmarks.cluster_run import ClusterRunError
from ps_toolkit.process import lifecycle

LAUNCH_LOCAL_MODULE = "ps_toolkit.tools.launch_local"
METHODS = ("fork", "exec")


def measure(repetitions: int, timeout_s: float = 300.0) -> dict:
    """{"fork": {...}, "exec": {...}, "fork_over_exec": ratio}: wall and CPU seconds, median, min, max, every run."""
    walls = {method: [] for method in METHODS}
    cpus = {method: [] for method in METHODS}
    load_before = os.getloadavg()[0]
    for _ in range(repetitions):
        for method in METHODS:
            wall, cpu = run_once(method, timeout_s)
            walls[method].append(wall)
            cpus[method].append(cpu)
    summary = {method: {**_summary(walls[method]), "cpu": _summary(cpus[method])} for method in METHODS}
    summary["fork_over_exec"] = round(summary["fork"]["median"] / summary["exec"]["median"], 2)
    summary["cpu_fork_over_exec"] = round(summary["fork"]["cpu"]["median"] / summary["exec"]["cpu"]["median"], 2)
    # Fork and exec of one repetition run back to back, under nearly the same load: the median of
    # their ratios is steadier than the ratio of the medians when the load drifts between repetitions.
    pairs = [fork / exec_ for fork, exec_ in zip(walls["fork"], walls["exec"], strict=True)]
    summary["pair_ratio_median"] = round(statistics.median(pairs), 2)
    summary["load_average"] = [round(load_before, 1), round(os.getloadavg()[0], 1)]
    return summary


def run_once(method: str, timeout_s: float) -> tuple[float, float]:
    """Wall and CPU seconds of one launch; ClusterRunError (with its output's tail) if it fails or overruns.

    The CPU is this process's reaped descendants' (getrusage): the launcher reaps
    its tasks and its fork server, the fork server its forked tasks.
    """
    run_dir = tempfile.mkdtemp(prefix="ps_toolkit_bench_main_")
    argv = [sys.executable, "-m", LAUNCH_LOCAL_MODULE, "--quiet", f"--log_dir={run_dir}", f"--start_method={method}"]
    try:
        with tempfile.TemporaryFile() as output:
            started, cpu_before = time.monotonic(), _children_cpu()
            proc = lifecycle.spawn(argv, env=dict(os.environ), stdout=output, stderr=output, cwd=PACKAGE_PARENT)
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
                raise ClusterRunError(f"launch_local.py --start_method={method} ended with {code}:\n{tail}")
        return seconds, _children_cpu() - cpu_before
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _summary(seconds: list[float]) -> dict:
    return {
        "median": round(statistics.median(seconds), 2),
        "min": round(min(seconds), 2),
        "max": round(max(seconds), 2),
        "runs": [round(s, 2) for s in seconds],
    }


def main(argv: list[str]) -> int:
    from ps_toolkit.benchmarks import report

    text = argv[1] if len(argv) > 1 else "3"
    if len(argv) > 2 or not text.isdigit() or int(text) < 1:
        print(f"main_job: repetitions {text!r} from the command line: give one whole number >= 1", file=sys.stderr)
        return 2
    summary = measure(int(text))
    print(report.main_job_line(summary))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
