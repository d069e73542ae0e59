"""Test helper: run the tasks of a cluster as real processes, bounded, and always clean up.

The toolkit's task scripts are forked from this test process's fork server, as
the launcher does (ps_toolkit.process.fork_starter); any other command is exec'd.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time

from ps_toolkit.launch.ports import reserve_ports
from ps_toolkit.process.group import ProcessGroup
from ps_toolkit.process.starter import make_starter

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
    the bound; the command's process tree is killed whatever happens.
    """
    env = dict(os.environ if env is None else env)
    deadline = time.monotonic() + timeout
    with ProcessGroup(make_starter("fork"), stop_grace_secs=0.0) as group:
        output = _Output(group, "script", command, env=env, cwd=cwd)
        group.drain(deadline)
        code = group.wait(["script"], max(deadline, time.monotonic() + 0.1))["script"]
        texts = output.texts()
        if code is None:
            raise subprocess.TimeoutExpired(command, timeout, output=texts["stdout"], stderr=texts["stderr"])
    return subprocess.CompletedProcess(command, code, texts["stdout"], texts["stderr"])


def run_tasks(
    commands: dict, *, timeout: float, env: dict | None = None, envs: dict | None = None, start_method: str = "fork"
) -> dict:
    """Starts every command at once and waits, at most ``timeout`` seconds in all.

    ``env`` is added to every task's environment, ``envs[name]`` to one task's.
    Returns {name: TaskOutcome}; ``ended_at`` is when its exit was seen. Whatever
    happens, every process tree that is still alive at the end is killed.
    """
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", **(env or {}))
    deadline = time.monotonic() + timeout
    with ProcessGroup(make_starter(start_method), stop_grace_secs=0.0) as group:
        outputs = {
            name: _Output(group, name, command, env={**env, **(envs or {}).get(name, {})}, cwd=REPO)
            for name, command in commands.items()
        }
        group.drain(deadline)
        codes = group.wait(outputs, max(deadline, time.monotonic() + 0.1))
        late = [name for name, code in codes.items() if code is None]
        for name in late:
            group.kill(name)
        if late:  # what they wrote before the kill, bounded
            group.drain(time.monotonic() + 10)
            group.wait(late, time.monotonic() + 10)
        outcomes = {}
        for name, output in outputs.items():
            texts = output.texts()
            if name in late:
                texts["stderr"] += f"\n[killed by the test after its {deadline:.0f} deadline]"
            ended_at = group.exited_at(name) or time.time()
            outcomes[name] = TaskOutcome(
                name, commands[name], group.returncode(name), texts["stdout"], texts["stderr"], ended_at
            )
    return outcomes


class _Output:
    """Starts one command in ``group`` with its stdout and stderr read by the group, kept as they come."""

    def __init__(self, group: ProcessGroup, name: str, command: list, *, env: dict, cwd: str | None):
        self.chunks = {"stdout": [], "stderr": []}
        proc = group.start(name, command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd)
        for stream, chunks in self.chunks.items():
            group.add_pipe(getattr(proc, stream), chunks.append)

    def texts(self) -> dict:
        return {name: b"".join(parts).decode("utf-8", "replace") for name, parts in self.chunks.items()}


def describe_all(outcomes: dict) -> str:
    return "\n".join(outcome.describe() for outcome in outcomes.values())


# The test accuracy a cluster's replicas reach after a full run of the built-in model.
TRAINED_ACCURACY = 0.8


def assert_cluster_trained(outcomes: dict, train_steps: int, min_accuracy: float = TRAINED_ACCURACY) -> str:
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
