"""The process-wide request to stop training: set by SIGTERM / Ctrl-C in a job with no step limit.

Readers that wait for data (``folder_input``) end their datasets when it is
set, and the trainer's hook ends the training loop after the current run:
the chief then writes its final checkpoint and every task ends with exit 0.
"""

from __future__ import annotations

import threading

_STOP = threading.Event()


def request() -> None:
    """Asks training to stop after the current run (safe from a signal handler)."""
    _STOP.set()


def requested() -> bool:
    return _STOP.is_set()


def wait(timeout_secs: float) -> bool:
    """Waits up to ``timeout_secs`` for a stop request; True if one came."""
    return _STOP.wait(timeout_secs)


def clear() -> None:
    """Forgets a request (a test that trains again in the same process)."""
    _STOP.clear()
