"""The launcher's console output, best-effort: a slow or gone reader never stops the run.

``BestEffortStream`` stands in for ``sys.stdout`` under ``status.Console``.
``write`` only queues the text (in memory, up to a bound); a thread of its own
does the blocking writes. A reader that pauses (``| (sleep 90; cat)``) costs
dropped lines once the queue is full, with one line saying how many when it
resumes; a reader that has gone (``| head``: EPIPE) ends the echo for good.
The run itself never waits on the console, and everything echoed is also in
the task logs and the run folder's summary.

    stream = BestEffortStream(sys.stdout)
    console = Console(stream)
    ...
    stream.close(timeout_secs=2.0)   # delivers what it can, then gives up
"""

from __future__ import annotations

import collections
import errno
import os
import threading
import time
from typing import TextIO

# What the console may hold back for a slow reader before lines are dropped.
QUEUE_LIMIT_BYTES = 1 << 20
_GONE = (errno.EPIPE, errno.EIO, errno.ENXIO, errno.EBADF)


class BestEffortStream:
    """A text stream whose writes never block; see the module docstring."""

    def __init__(self, stream: TextIO, limit_bytes: int = QUEUE_LIMIT_BYTES):
        self._tty = stream.isatty()
        self._fd = stream.fileno()
        self._limit = limit_bytes
        self._queue: collections.deque[bytes] = collections.deque()
        self._queued = 0
        self._dropped = 0
        self._cond = threading.Condition()
        self._closing = False
        self._busy = False  # a write to the reader is under way
        self.gone: OSError | None = None  # the error that ended the echo, if any
        try:
            stream.flush()  # what was printed before comes first
        except OSError as err:
            self.gone = err
        self._thread = threading.Thread(target=self._deliver, name="console", daemon=True)
        self._thread.start()

    def isatty(self) -> bool:
        return self._tty

    def write(self, text: str) -> int:
        data = text.encode("utf-8", "replace")
        with self._cond:
            if self.gone is not None or self._closing:
                return len(text)
            if self._queued + len(data) > self._limit:
                self._dropped += text.count("\n") or 1
                return len(text)
            if self._dropped:
                note = f"launcher: the console reader was too slow: {self._dropped} lines not shown here\n"
                self._dropped = 0
                self._append(note.encode())
            self._append(data)
        return len(text)

    def flush(self) -> None:
        with self._cond:
            self._cond.notify()

    def close(self, timeout_secs: float = 2.0) -> None:
        """Waits up to ``timeout_secs`` for the queue to reach the reader, then drops the rest.

        When the reader has gone, the stream's descriptor is pointed at /dev/null, so that
        the interpreter's own flush at exit cannot fail on it.
        """
        deadline = time.monotonic() + timeout_secs
        with self._cond:
            self._closing = True
            self._cond.notify()
            while (self._queue or self._busy) and self.gone is None and time.monotonic() < deadline:
                self._cond.wait(max(0.0, deadline - time.monotonic()))
            self._queue.clear()
            gone = self.gone
        if gone is not None:
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, self._fd)
            finally:
                os.close(devnull)

    def _append(self, data: bytes) -> None:
        self._queue.append(data)
        self._queued += len(data)
        self._cond.notify()

    def _deliver(self) -> None:
        while True:
            with self._cond:
                self._busy = False
                while not self._queue:
                    self._cond.notify_all()  # close() waits until everything is written
                    self._cond.wait()
                data = self._queue.popleft()
                self._queued -= len(data)
                self._busy = True
            try:
                while data:
                    data = data[os.write(self._fd, data) :]
            except OSError as err:
                with self._cond:
                    if err.errno in _GONE:
                        self.gone = err
                        self._queue.clear()
                        self._queued = 0
                        self._cond.notify_all()
                        return
                    self._dropped += 1
