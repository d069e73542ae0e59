"""Test helpers for real engines: their daemons (Ray nodes, Spark master and workers) and the runs' checks.

Each daemon runs in the foreground as a child of the test in a session of its own
(``lifecycle.spawn``), so stopping it (``lifecycle.stop_trees``: SIGTERM, a grace
period, SIGKILL) takes every process it started with it, and nothing is found
by name. Readiness is a line of the daemon's output, awaited with a bound.
"""

from __future__ import annotations

import os
import re
import selectors
import subprocess
import threading
import time
from collections.abc import Sequence

import psutil
import pytest

from ps_toolkit.network import port_guard
from ps_toolkit.process import lifecycle


def unavailable(engine: str, reason: str):
    """Fails in CI, where the engines are installed on purpose; skips on a developer's machine."""
    if os.environ.get("CI"):
        pytest.fail(f"{engine} test cannot run in CI: {reason}")
    pytest.skip(reason)


class Daemons:
    """The daemons of one engine cluster; ``stop()`` ends every one of them and their descendants."""

    def __init__(self, env: dict[str, str]):
        self.env = env
        self.processes: list[subprocess.Popen] = []
        self.output: list[str] = []

    def start(self, argv: Sequence[str], ready: str, timeout_secs: float, attempts: int = 1) -> subprocess.Popen:
        """Starts ``argv``; returns once a line of its output contains ``ready`` (fails the test after the bound).

        ``attempts`` > 1: a start that failed is stopped and made again, for daemons whose own start-up has a
        fixed bound that a loaded machine can miss (``ray start`` waits 30 s for its raylet to register).
        """
        for _ in range(attempts - 1):
            try:
                return self._start_once(argv, ready, timeout_secs)
            except pytest.fail.Exception:
                lifecycle.stop_trees([self.processes.pop()], 10.0)
        return self._start_once(argv, ready, timeout_secs)

    def _start_once(self, argv: Sequence[str], ready: str, timeout_secs: float) -> subprocess.Popen:
        process = lifecycle.spawn(argv, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=False)
        self.processes.append(process)
        deadline = time.monotonic() + timeout_secs
        seen = b""
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            while ready.encode() not in seen:
                left = deadline - time.monotonic()
                if left <= 0 or process.poll() is not None:
                    self.output.append(seen.decode(errors="replace"))
                    pytest.fail(f"{argv[0]} did not print {ready!r} within {timeout_secs:g}s:\n{seen[-3000:]!r}")
                if selector.select(timeout=left):
                    chunk = os.read(process.stdout.fileno(), 1 << 16)
                    seen += chunk
        self.output.append(seen.decode(errors="replace"))
        # Later output would fill the pipe and block the daemon: it goes nowhere from now on.
        _drain_in_background(process)
        return process

    def stop(self, grace_secs: float = 10.0) -> None:
        lifecycle.stop_trees(list(reversed(self.processes)), grace_secs)
        for process in self.processes:
            process.stdout.close()


def open_ports() -> list[str]:
    """The tasks guard their ports where the machine can (root with iptables, as CI is); elsewhere they are
    told the open port is intended, or they would refuse to start."""
    return [] if port_guard.unavailable_reason() is None else ["--allow_open_ports"]


def assert_no_task_left(log_dir: str) -> None:
    """No task process of the run (they all name its folder, through --checkpoint_dir) is still alive."""
    left = [p for p in psutil.process_iter(["cmdline"]) if any(log_dir in arg for arg in p.info["cmdline"] or ())]
    assert not left, f"task processes left behind: {[p.info['cmdline'] for p in left]}"


def summary_rows(log_dir: str) -> dict[str, list[str]]:
    """The run's summary table, a row of cells per task name."""
    with open(os.path.join(log_dir, "summary.txt"), encoding="utf-8") as handle:
        text = handle.read()
    rows = re.finditer(r"^((?:ps|worker|chief|evaluator):\d+) .*$", text, re.M)
    return {row.group(1): row.group(0).split() for row in rows}


def describe(done: subprocess.CompletedProcess) -> str:
    return f"exit {done.returncode}\nstdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-3000:]}"


def _drain_in_background(process: subprocess.Popen) -> None:
    def drain() -> None:
        try:
            while os.read(process.stdout.fileno(), 1 << 16):
                pass
        except (OSError, ValueError):
            pass

    threading.Thread(target=drain, daemon=True).start()
