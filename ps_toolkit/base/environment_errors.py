"""Disk full, read-only, wrong file type, permission: one line and EXIT_ENVIRONMENT, not a traceback.

These come from the machine, not from a bug or the task's peers: restarting
the task in place fails again (a full disk retried 3 times while a worker
trained 1,000 steps that were never saved), so they get a status of their own
that restart policies do not retry. TensorFlow reports the same conditions as
OpErrors whose message carries the C library's text; both are recognised.
"""

from __future__ import annotations

import contextlib
import errno

from ps_toolkit.base.errors import EnvironmentProblem

# errno -> what to tell the user to fix.
_ERRNOS = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ENOTDIR: "a path component is a file, not a folder",
    errno.EISDIR: "a folder is where a file should be",
    errno.EEXIST: "a file is in the way of a folder",
}
# The same conditions in TensorFlow's error messages (strerror texts).
_MESSAGES = {
    "No space left on device": "the disk is full",
    "Disk quota exceeded": "the disk quota is exceeded",
    "Read-only file system": "the file system is read-only",
    "Permission denied": "permission denied",
    "Not a directory": "a path component is a file, not a folder",
    "Is a directory": "a folder is where a file should be",
}


def describe(error: BaseException) -> str | None:
    """One line for an environment error, or None when ``error`` is something else."""
    if isinstance(error, OSError) and error.errno in _ERRNOS:
        path = f" ({error.filename})" if error.filename else ""
        return f"{_ERRNOS[error.errno]}{path}: {error.strerror}"
    message = getattr(error, "message", None)
    if isinstance(message, str) and type(error).__module__.startswith("tensorflow"):
        for text, meaning in _MESSAGES.items():
            if text in message:
                return f"{meaning}: {_line_naming(message, text)[:300]}"
    return None


def _line_naming(message: str, text: str) -> str:
    """The line of ``message`` that holds ``text`` (the OS error), after its first line where that says more.

    TensorFlow's graph errors start with "Graph execution error:" and give the
    failing op's status (the file and the OS error) lines later.
    """
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    cause = next((line for line in lines if text in line), "")
    first = lines[0] if lines else ""
    if cause == first or first.endswith(":"):  # "Graph execution error:" says nothing of its own
        return cause
    return f"{first.rstrip('.')}: {cause}"


@contextlib.contextmanager
def reported(what: str):
    """Turns an environment error raised inside into EnvironmentProblem('<what>: <reason>')."""
    try:
        yield
    except Exception as err:
        line = describe(err)
        if line is None:
            raise
        raise EnvironmentProblem(f"{what}: {line}") from None
