"""A task forked by a fork server (``fork_client.ForkServer``): a handle that behaves like ``subprocess.Popen``.

A ``ForkedProcess`` is the task's own process (a child of the server, in its
own session), so everything that signals a Popen's pid or process group, opens
a pidfd on it or walks its tree with psutil works unchanged. Its exit status
comes from the server, which reaps it.
"""

from __future__ import annotations

import os
import select
import subprocess
import time

# A child's exit status follows its exit at once; this only bounds a stuck server.
STATUS_TIMEOUT_SECS = 10.0


def open_reader(fd: int, text: bool):
    """A pipe's read end as the file object ``Popen`` would give (text or bytes)."""
    if text:
        return open(fd, encoding="utf-8", errors="replace")  # noqa: SIM115 - the caller closes it
    return open(fd, "rb")  # noqa: SIM115


class ForkedProcess:
    """A task forked by a fork server, with the parts of ``subprocess.Popen`` that launchers use."""

    def __init__(self, server, pid: int, args: list, stdout, stderr):
        self._server = server
        self.pid, self.args, self.stdout, self.stderr = pid, args, stdout, stderr
        self.stdin = None
        self.returncode: int | None = None
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except OSError:
            self._pidfd = None  # already reaped by the server: its status is on the way

    @property
    def lost_with(self) -> str | None:
        """Once the fork server that forked this task has gone (taking its tasks with it): which one."""
        if self._server.alive:
            return None
        return f"its fork server, {self.server_name}, which has gone"

    @property
    def server_name(self) -> str:
        """The fork server that forked this task: a host's server's address, or the launch's own."""
        return self._server.address or f"the launch's own (pid {self._server.pid})"

    def poll(self) -> int | None:
        if self.returncode is None:
            self._settle(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            step = 1.0 if deadline is None else max(0.0, deadline - time.monotonic())
            self._settle(min(step, 1.0))
            if self.returncode is None and deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(15)

    def kill(self) -> None:
        self.send_signal(9)

    def _settle(self, wait_secs: float) -> None:
        """Sets ``returncode`` once the task has exited; waits at most ``wait_secs`` for the exit itself."""
        if not self._exited(wait_secs):
            code = self._server.status(self.pid, time.monotonic())
            if code is not None:
                self._record(code)
            return
        # It has exited: the server reaps it and reports its status right away.
        code = self._server.status(self.pid, time.monotonic() + STATUS_TIMEOUT_SECS)
        # No report (the server itself died, taking its tasks with it): a SIGKILL is what ended it.
        self._record(-9 if code is None else code)

    def _exited(self, wait_secs: float) -> bool:
        if self._pidfd is None:
            return True
        ready, _, _ = select.select([self._pidfd], [], [], wait_secs)
        return bool(ready)

    def _record(self, code: int) -> None:
        self.returncode = code
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def __del__(self):
        if getattr(self, "_pidfd", None) is not None:
            os.close(self._pidfd)
