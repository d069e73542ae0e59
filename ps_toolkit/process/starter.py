"""The task-starter interface: what starts a task's command and the process handle it gives back.

    starter = make_starter("fork", note=console.line)    # or "exec", or any object with start()
    process = starter.start(argv, env=env, stdout=log, stderr=log, cwd=None)
    process.pid, process.poll(), process.wait(timeout=5), process.send_signal(15), process.kill()
    process.lost_with    # None, or what ended the task besides itself (its fork server, gone)

The process owner (``group.ProcessGroup``) and the launcher use only this
interface: they never know which starter made a process. ``ExecStarter``
starts every command as a fresh process; ``fork_starter.ForkStarter`` forks the
registered task entries (``task_entries``) from a fork server and execs the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import IO, Protocol

from ps_toolkit.process import lifecycle

START_METHODS = ("fork", "exec")


class TaskProcess(Protocol):
    """A started task, with the parts of ``subprocess.Popen`` the process owner uses."""

    pid: int
    args: list
    stdout: IO | None
    stderr: IO | None
    returncode: int | None

    @property
    def lost_with(self) -> str | None:
        """What ended the task besides itself (a fork server that has gone, say), or None."""

    def poll(self) -> int | None:
        """The exit code once the task has ended, else None; never blocks."""

    def wait(self, timeout: float | None = None) -> int:
        """The exit code, waited for at most ``timeout`` seconds (``subprocess.TimeoutExpired`` past it)."""

    def send_signal(self, sig: int) -> None:
        """Sends ``sig`` to the task while it runs."""

    def terminate(self) -> None:
        """SIGTERM."""

    def kill(self) -> None:
        """SIGKILL."""


class TaskStarter(Protocol):
    """Starts a task's command; what every starter (exec, fork server, a user's own) provides."""

    def start(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        stdout,
        stderr,
        cwd: str | None = None,
        text: bool = False,
    ) -> TaskProcess:
        """Starts ``argv`` in a session of its own that dies with this thread; its process.

        Raises:
          OSError: the command cannot be run (no such file, not executable).
        """


class ExecStarter:
    """Starts every command as a fresh process (``lifecycle.spawn``)."""

    method = "exec"

    def start(self, argv, *, env, stdout, stderr, cwd=None, text=False) -> TaskProcess:
        """See ``TaskStarter.start``."""
        return lifecycle.spawn(argv, env=env, stdout=stdout, stderr=stderr, cwd=cwd, text=text)


def make_starter(
    method: str = "fork", note: Callable[[str], None] | None = None, preload: Sequence[str] = ()
) -> TaskStarter:
    """The starter a start method names.

    Args:
      method: "fork" (the registered task entries from a fork server, the rest by exec) or "exec".
      note: receives the one line a fork starter prints when it falls back to exec (default: stderr).
      preload: modules a fork server imports besides the registered ones (task_entries.preload).

    Returns:
      A ``TaskStarter``.

    Raises:
      ValueError: an unknown method.
    """
    if method not in START_METHODS:
        raise ValueError(f"start method {method!r}; valid: {', '.join(START_METHODS)}")
    if method == "exec":
        return ExecStarter()
    from ps_toolkit.process.fork_starter import ForkStarter  # the fork machinery only when asked for

    return ForkStarter(note=note, preload=preload)
