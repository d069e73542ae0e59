"""Test helper: runs scripts/launch_local.py, bounded, and reads back each task's log."""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAUNCH_LOCAL = os.path.join(REPO, "scripts", "launch_local.py")
RUN_LEGACY = os.path.join(REPO, "scripts", "run_legacy.py")


@dataclasses.dataclass
class Launch:
    command: list
    returncode: int
    output: str
    logs: dict  # "worker-0" -> text

    def describe(self) -> str:
        logs = "\n".join(f"--- {name}.log (tail)\n{text[-2500:]}" for name, text in sorted(self.logs.items()))
        return f"$ {' '.join(self.command)}\nexit {self.returncode}\n{self.output[-3000:]}\n{logs}"

    def final_accuracies(self, pattern=r"final accuracy = ([0-9.]+)") -> dict:
        """{task log name: the accuracy its last matching line printed}."""
        found = {}
        for name, text in self.logs.items():
            values = re.findall(pattern, text)
            if values:
                found[name] = float(values[-1])
        return found


def launch(log_dir, launcher_args, command, *, timeout_secs: float = 150.0, cwd=REPO) -> Launch:
    """``launch_local.py LAUNCHER_ARGS -- COMMAND`` run in ``cwd``; the launcher's own timeout ends every task first."""
    argv = [
        sys.executable,
        LAUNCH_LOCAL,
        f"--log_dir={log_dir}",
        "--quiet",
        f"--timeout_secs={timeout_secs}",
        "--stop_grace_secs=2",
        "--nochart",
        *launcher_args,
        "--",
        *command,
    ]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_secs + 60, env=env, cwd=cwd)
    logs = {}
    for name in os.listdir(log_dir):
        if name.endswith(".log"):
            with open(os.path.join(log_dir, name), encoding="utf-8", errors="replace") as handle:
                logs[name[: -len(".log")]] = handle.read()
    return Launch(argv, proc.returncode, proc.stdout + proc.stderr, logs)


def legacy(script: str, *args: str) -> list:
    """The task command that runs a TF 1.x script through the compat layer."""
    return [sys.executable, RUN_LEGACY, script, *args]


def busy_ports(ports) -> list:
    """The ports among ``ports`` that something on this machine already listens on."""
    busy = []
    for port in ports:
        with socket.socket() as probe:
            try:
                probe.bind(("localhost", port))
            except OSError:
                busy.append(port)
    return busy
