"""Where a task that does not end is waiting: its threads' Python stacks, asked for with SIGUSR1.

The toolkit's task entry (a ``task_entries.TaskEntry`` with ``dumps_stacks``) registers
``faulthandler`` on ``DUMP_SIGNAL``: the signal makes the task write every
thread's stack to its stderr, its log file, and go on. The launcher and
``LocalCluster`` ask for it before they give up on a task, so the error they
raise shows where the task waited instead of only its last log lines. Other
commands are never sent the signal: its default action ends a process.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence

from ps_toolkit.process import task_entries

DUMP_SIGNAL = signal.SIGUSR1
# faulthandler starts every thread's stack with this line.
_STACK_HEADER = b"(most recent call first):"
_SETTLE_SECS = 0.1


def dumps_stacks(argv: Sequence[str]) -> bool:
    """Whether ``argv`` runs a task entry registered as answering ``DUMP_SIGNAL``."""
    entry = task_entries.entry_of(argv)
    return entry is not None and entry.dumps_stacks


def stacks_of_task(argv: Sequence[str], pid: int, log_path: str) -> str | None:
    """The stacks of task ``pid`` running ``argv`` (request_stacks), or None when ``argv`` does not answer."""
    return request_stacks(pid, log_path) if dumps_stacks(argv) else None


def request_stacks(pid: int, log_path: str, timeout_secs: float = 3.0) -> str | None:
    """Sends ``DUMP_SIGNAL`` to task ``pid`` and returns the stacks it appended to ``log_path``.

    None when the task is gone or wrote none within ``timeout_secs``.
    """
    try:
        offset = os.path.getsize(log_path)
        os.kill(pid, DUMP_SIGNAL)
    except OSError:
        return None
    deadline = time.monotonic() + timeout_secs
    seen = b""
    while time.monotonic() < deadline:
        # The task writes from its signal handler, in another process: there is no event to wait on.
        time.sleep(_SETTLE_SECS)
        written = _read_from(log_path, offset)
        if _STACK_HEADER in written and written == seen:
            break
        seen = written
    if _STACK_HEADER not in seen:
        return None
    first_line = seen.rfind(b"\n", 0, seen.index(_STACK_HEADER)) + 1
    return seen[first_line:].decode("utf-8", "replace")


def _read_from(path: str, offset: int) -> bytes:
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            return handle.read()
    except OSError:
        return b""
