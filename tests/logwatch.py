"""Test helper: read the progress and messages a LocalCluster task writes to its log, with bounded waits."""

from __future__ import annotations

import json
import threading
import time

from ps_toolkit.launch.task_output import PROGRESS_PREFIX

_POLL_SECS = 0.2


def read_log(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


def progress(path: str) -> list[dict]:
    """Every progress record in the log, in order."""
    records = []
    for line in read_log(path).splitlines():
        if line.startswith(PROGRESS_PREFIX):
            records.append(json.loads(line[len(PROGRESS_PREFIX) :]))
    return records


def wait_until(condition, timeout: float, what: str, describe=lambda: ""):
    """Re-checks ``condition()`` (a log is a file: nothing to block on) until truthy or the bound passes."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{describe()}")
        pause.wait(_POLL_SECS)


def wait_for_step(path: str, min_step: int, timeout: float, after_time: float = 0.0) -> dict:
    """The first progress record at or past ``min_step`` written after ``after_time`` (unix seconds)."""

    def reached():
        for record in progress(path):
            if record["global_step"] >= min_step and record["time"] >= after_time:
                return record
        return None

    return wait_until(reached, timeout, f"global step {min_step} in {path}", lambda: read_log(path)[-3000:])
