"""What the launcher shows while it runs and at the end: status line and summary table.

On a terminal the status line is redrawn in place a few times a second, and
task output is printed above it; elsewhere (a CI log, a pipe) a plain status
line is printed every few seconds instead.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import signal
import sys
from collections.abc import Sequence
from typing import TextIO

from ps_toolkit.base import paths
from ps_toolkit.base.errors import EXIT_CODE_MEANINGS

PLAIN_STATUS_INTERVAL_SECS = 5.0
TTY_STATUS_INTERVAL_SECS = 0.25


class Console:
    """The launcher's console: task lines, launcher messages and the status line."""

    def __init__(self, stream: TextIO = sys.stdout, *, tty: bool | None = None):
        self._stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self._status = ""
        self._last_status_at = float("-inf")

    @property
    def status_interval(self) -> float:
        return TTY_STATUS_INTERVAL_SECS if self.tty else PLAIN_STATUS_INTERVAL_SECS

    def line(self, text: str) -> None:
        """Prints a line above the status line."""
        if self.tty and self._status:
            self._stream.write("\r\x1b[2K")
        self._stream.write(text + "\n")
        if self.tty and self._status:
            self._stream.write(self._status)
        self._stream.flush()

    def status(self, text: str, now: float) -> None:
        """Shows the status, at most once per status interval."""
        if now - self._last_status_at < self.status_interval:
            return
        self._last_status_at = now
        if self.tty:
            self._status = text
            self._stream.write("\r\x1b[2K" + text)
            self._stream.flush()
        else:
            self.line(text)

    def clear_status(self) -> None:
        if self.tty and self._status:
            self._stream.write("\r\x1b[2K")
            self._stream.flush()
        self._status = ""


class StepRate:
    """Global steps per second over a sliding window of (time, global step) samples."""

    def __init__(self, window_secs: float = 5.0):
        self._window = window_secs
        self._samples: collections.deque[tuple[float, int]] = collections.deque()

    def add(self, now: float, global_step: int) -> None:
        if self._samples and global_step < self._samples[-1][1]:
            self._samples.clear()  # the step went back: a restore from a checkpoint
        self._samples.append((now, global_step))
        while len(self._samples) > 2 and now - self._samples[0][0] > self._window:
            self._samples.popleft()

    @property
    def per_sec(self) -> float:
        if len(self._samples) < 2:
            return 0.0
        (t0, s0), (t1, s1) = self._samples[0], self._samples[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 else 0.0


def status_text(
    *,
    elapsed: float,
    global_step: int | None,
    rate: float,
    states: dict[str, str],
    cpu: float,
    rss: int,
    accuracy: float | None = None,
) -> str:
    """One line: time, global step, steps/s, the latest accuracy a task reported, each task's state, CPU, memory."""
    step = "-" if global_step is None else str(global_step)
    tasks = " ".join(f"{name}={state}" for name, state in states.items())
    metric = "" if accuracy is None else f" accuracy {accuracy:.4g}"
    usage = f"cpu {cpu:4.0f}% mem {rss / 2**20:6.0f} MiB"
    return f"{elapsed:6.1f}s step {step} {rate:7.1f} steps/s{metric} | {tasks} | {usage}"


@dataclasses.dataclass(frozen=True)
class SummaryRow:
    task: str
    address: str
    exit_status: str
    restarts: int
    run_secs: float
    steps: int | None


def summary_table(rows: Sequence[SummaryRow]) -> str:
    """The end-of-run table, one row per task."""
    header = ("task", "address", "exit status", "restarts", "run time", "steps")
    cells = [header] + [
        (
            r.task,
            r.address,
            r.exit_status,
            str(r.restarts),
            f"{r.run_secs:.1f}s",
            "-" if r.steps is None else str(r.steps),
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def describe_exit(code: int, drill_killed: bool) -> str:
    """'exited with status 2 (configuration ...)' or 'was killed by SIGKILL'."""
    if code < 0:
        return f"was killed by {_signal_name(code)}" + (" (--kill drill)" if drill_killed else "")
    return f"exited with status {code} ({EXIT_CODE_MEANINGS.get(code, 'task-specific failure')})"


def exit_status_cell(code: int | None, state: str) -> str:
    """The summary table's exit status: '0 (finished)', 'SIGTERM (stopped)'."""
    if code is None:
        return state
    text = _signal_name(code) if code < 0 else str(code)
    return f"{text} ({state})"


def write_pids(log_dir: str, pids: dict[str, int], on_error) -> None:
    """pids.json in the run folder: each running task's pid (its latest start), for an operator's ps or kill."""
    try:
        paths.write_file_nofollow(os.path.join(log_dir, "pids.json"), json.dumps(pids, sort_keys=True))
    except OSError as err:
        on_error(err)
