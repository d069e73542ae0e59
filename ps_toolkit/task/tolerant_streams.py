"""A task's stdout and stderr that survive a full log disk: what does not fit is dropped, the task goes on.

A task launched by the launcher writes straight into its log file. On a full
disk (or a quota), Python's own streams raise ``OSError: [Errno 28]`` from the
next ``print`` or flush, even at exit (status 120): a training task would die
of its log. ``install()`` replaces ``sys.stdout`` and ``sys.stderr`` with
streams on the same descriptors that drop such writes instead; every other
error still raises. The launcher warns about the full folder, once.

    tolerant_streams.install()   # in the task, before it prints anything
"""

from __future__ import annotations

import errno
import io
import os
import sys

_DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class _DroppingWriter(io.RawIOBase):
    """Writes to ``fd``; a write the disk has no room for counts as done (its bytes are lost)."""

    def __init__(self, fd: int):
        super().__init__()
        self._fd = fd
        self.dropped = 0

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def write(self, data) -> int:
        try:
            return os.write(self._fd, data)
        except OSError as err:
            if err.errno not in _DISK_FULL:
                raise
            self.dropped += len(data)
            return len(data)

    def close(self) -> None:  # the descriptor is the process's own fd 1 or 2: left open
        super().close()


def tolerant(stream, fd: int):
    """A text stream like ``stream`` (encoding, errors) on ``fd``, which drops writes on a full disk.

    Line-buffered: stdout and stderr share the task's log file, and their lines
    must land there in the order they were written.
    """
    return io.TextIOWrapper(
        io.BufferedWriter(_DroppingWriter(fd)),
        encoding=getattr(stream, "encoding", None) or "utf-8",
        errors=getattr(stream, "errors", None) or "backslashreplace",
        line_buffering=True,
        write_through=True,
    )


def install() -> None:
    """Replaces sys.stdout and sys.stderr (fds 1 and 2) with ``tolerant`` ones, after flushing them."""
    for name, fd in (("stdout", 1), ("stderr", 2)):
        old = getattr(sys, name)
        try:
            if old is not None:
                old.flush()
        except (OSError, ValueError):
            pass
        setattr(sys, name, tolerant(old, fd))
