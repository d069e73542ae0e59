"""Test helper: run the tasks of a cluster as real processes, bounded, and always clean up.

The toolkit's task scripts are forked from this test process's fork server, as
the launcher does (ps_toolkit.process.fork_client); any other command is exec'd.
"""

from __future__ import annotations

import dataclasses
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time

from ps_toolkit.launch.ports import reserve_ports
from ps_toolkit.process.fork_client import TaskStarter

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_TASK = os.path.join(REPO, "scripts", "run_task.py")


@dataclasses.dataclass
class TaskOutcome:
    name: str
    command: list
    returncode: int | None
    stdout: str
    stderr: str
    ended_at: float

    def describe(self) -> str:
        return (
            f"--- {self.name}: exit {self.returncode}\n$ {' '.join(self.command)}\n"
            f"stdout (tail):\n{self.stdout[-3000:]}\nstderr (tail):\n{self.stderr[-3000:]}"
        )

    def result(self) -> dict:
        """The task's last stdout line, parsed."""
        lines = [line for line in self.stdout.splitlines() if line.strip()]
        return json.loads(lines[-1])

    def progress(self) -> list:
        prefix = "ps_toolkit progress: "
        return [json.loads(line[len(prefix) :]) for line in self.stdout.splitlines() if line.startswith(prefix)]


def loopback_hosts(num_ps: int, num_workers: int) -> tuple[str, str, object]:
    """Reserved ports as (--ps_hosts, --worker_hosts, reservation)."""
    reservation = reserve_ports(num_ps + num_workers)
    addresses = [f"localhost:{port}" for port in reservation.ports]
    return ",".join(addresses[:num_ps]), ",".join(addresses[num_ps:]), reservation


def python_command(script: str, *args: str) -> list:
    return [sys.executable, script, *args]


def run_script(
    command: list, *, timeout: float, env: dict | None = None, cwd: str | None = None
) -> subprocess.CompletedProcess:
    """``subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)``, but
    the toolkit's task scripts (run_task.py, run_legacy.py) are forked from this process's shared fork
    server instead of importing TensorFlow again; any other command is exec'd.

    ``env`` is the whole environment (default: this process's). Raises subprocess.TimeoutExpired at
    the bound; the command's process group is killed whatever happens.
    """
    env = dict(os.environ if env is None else env)
    proc = TaskStarter("fork").start(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd)
    deadline = time.monotonic() + timeout
    try:
        texts = _read_until(proc, deadline)
        try:
            code = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise subprocess.TimeoutExpired(command, timeout, output=texts["stdout"], stderr=texts["stderr"]) from None
    finally:
        _kill_group(proc)
        for stream in (proc.stdout, proc.stderr):
            stream.close()
    return subprocess.CompletedProcess(command, code, texts["stdout"], texts["stderr"])


def run_tasks(
    commands: dict, *, timeout: float, env: dict | None = None, envs: dict | None = None, start_method: str = "fork"
) -> dict:
    """Starts every command at once and waits, at most ``timeout`` seconds in all.

    ``env`` is added to every task's environment, ``envs[name]`` to one task's.
    Returns {name: TaskOutcome}. Whatever happens, every process group that
    is still alive at the end is killed.
    """
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", **(env or {}))
    starter = TaskStarter(start_method)
    procs = {}
    outcomes = {}
    deadline = time.monotonic() + timeout
    try:
        for name, command in commands.items():
            task_env = {**env, **(envs or {}).get(name, {})}
            procs[name] = starter.start(command, env=task_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
        threads = [
            threading.Thread(target=_collect, args=(name, commands[name], proc, deadline, outcomes))
            for name, proc in procs.items()
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(max(0.1, deadline - time.monotonic()) + 20)
    finally:
        for proc in procs.values():
            _kill_group(proc)
    return outcomes


def _collect(name, command, proc, deadline, outcomes) -> None:
    """Waits for one process (each in its own thread, so exit times are exact)."""
    texts = _read_until(proc, deadline)
    try:
        proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        more = _read_until(proc, time.monotonic() + 10)
        texts = {stream: texts[stream] + more[stream] for stream in texts}
        proc.wait(timeout=10)
        texts["stderr"] += f"\n[killed by the test after its {deadline:.0f} deadline]"
    for stream in (proc.stdout, proc.stderr):
        stream.close()
    outcomes[name] = TaskOutcome(name, command, proc.returncode, texts["stdout"], texts["stderr"], time.time())


def _read_until(proc, deadline: float) -> dict:
    """Reads the process's stdout and stderr until both close or ``deadline`` (time.monotonic()) passes."""
    chunks = {"stdout": [], "stderr": []}
    with selectors.DefaultSelector() as selector:
        for name in chunks:
            stream = getattr(proc, name)
            if not stream.closed:
                selector.register(stream, selectors.EVENT_READ, name)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for key, _ in selector.select(timeout=left):
                data = os.read(key.fd, 1 << 16)
                if data:
                    chunks[key.data].append(data)
                else:
                    selector.unregister(key.fileobj)
                    key.fileobj.close()
    return {name: b"".join(parts).decode("utf-8", "replace") for name, parts in chunks.items()}


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def describe_all(outcomes: dict) -> str:
    return "\n".join(outcome.describe() for outcome in outcomes.values())


def assert_cluster_trained(outcomes: dict, train_steps: int, min_accuracy: float = 0.8) -> str:
    """Asserts 1 ps + 2 workers all ended with 0 and trained to the end; returns the report."""
    report = describe_all(outcomes)
    assert all(o.returncode == 0 for o in outcomes.values()), report
    assert outcomes["ps:0"].result()["replicas_done"] == 2, report
    for name in ("worker:0", "worker:1"):
        result = outcomes[name].result()
        assert result["global_step"] >= train_steps and result["local_steps"] > 0, report
        # Every worker evaluates the shared final model; a late joiner's own first loss says little.
        assert result["test_accuracy"] > min_accuracy, report
    return report
