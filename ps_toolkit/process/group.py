"""One owner for a set of named task processes: starts them, watches them, stops them and their trees.

    with ProcessGroup(ExecStarter()) as group:
        proc = group.start("ps:0", argv, env=env, stdout=log, stderr=log)
        group.add_pipe(proc.stdout, on_data)      # for pipes: on_data(bytes), b"" at the end
        group.add_reader(signal_fd, on_signal)    # any other fd: on_signal() when it is readable
        for name in group.poll(0.2):              # the names that exited since the last poll
            group.returncode(name), group.exited_at(name)
        group.kill("ps:0")                        # SIGKILL to the task, its group and descendants
        group.stop(["ps:0"], grace_secs=5.0)      # SIGTERM, grace, SIGKILL (lifecycle.stop_trees)
    # on leaving: every process still alive and every descendant is stopped; fds are closed

One selector waits on a pidfd per process (it turns readable when the process
exits), the pipes and the readers added, so an exit or a line wakes the caller
at once and a quiet group costs no CPU. Every wait has a bound; without pidfds
(kernels before 5.3) the processes are polled at least every
``FALLBACK_POLL_SECS``. Everything runs on the caller's thread: a task started
with ``lifecycle.spawn`` dies when the thread that started it ends, so the
thread that owns the group should live as long as its tasks.
"""

from __future__ import annotations

import dataclasses
import os
import selectors
import signal
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from ps_toolkit.process import lifecycle
from ps_toolkit.process.starter import TaskStarter, make_starter

# How often processes without a pidfd are polled.
FALLBACK_POLL_SECS = 1.0
_READ_BYTES = 1 << 16


@dataclasses.dataclass
class _Entry:
    """A started process (a ``starter.TaskProcess``, whichever starter made it) and what the group knows of it."""

    proc: object
    pidfd: int | None
    exited_at: float | None = None  # time.time() when the group first saw it exited
    reported: bool = False  # poll() returned its name


class ProcessGroup:
    """Named task processes with one owner: see the module docstring.

    ``starter`` starts each process (any ``starter.TaskStarter``; default: ``make_starter()``, fork where it can);
    ``stop_grace_secs`` is what ``close()`` and ``stop()`` give between SIGTERM and
    SIGKILL; ``on_start(pid)`` is told each pid once started (a ``RunReaper``'s ``add``).
    """

    def __init__(
        self,
        starter: TaskStarter | None = None,
        *,
        stop_grace_secs: float = 5.0,
        on_start: Callable[[int], None] | None = None,
    ):
        self._starter = starter or make_starter()
        self._stop_grace_secs = stop_grace_secs
        self._on_start = on_start
        self._selector = selectors.DefaultSelector()
        self._entries: dict[str, _Entry] = {}
        self._pipes: set = set()  # file objects from add_pipe, closed by the group
        self._closed = False

    def __enter__(self) -> ProcessGroup:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # Starting.
    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        stdout,
        stderr,
        cwd: str | None = None,
        text: bool = False,
        spawn: Callable | None = None,
    ):
        """Starts ``argv`` as ``name`` and returns its handle (Popen-like).

        ``spawn`` replaces the group's starter for this one process (same
        arguments as ``TaskStarter.start``). Starting a name again (a restart)
        replaces its old process, which must have exited or been stopped
        (RuntimeError otherwise); the old one's exit is then reported no more.
        An error from the starter (OSError: no such command) leaves the old one in place.
        """
        if self._closed:
            raise RuntimeError("the process group is closed")
        old = self._entries.get(name)
        if old is not None and old.proc.poll() is None:
            raise RuntimeError(f"{name} is still running: stop it before starting it again")
        spawn = spawn or self._starter.start
        proc = spawn(argv, env=env, stdout=stdout, stderr=stderr, cwd=cwd, text=text)
        if old is not None:
            self._drop_pidfd(old)
        entry = self._entries[name] = _Entry(proc, lifecycle.pid_fd(proc))
        if entry.pidfd is not None:
            self._selector.register(entry.pidfd, selectors.EVENT_READ, ("exit", name))
        if self._on_start is not None:
            self._on_start(proc.pid)
        return proc

    # What the group knows.
    @property
    def names(self) -> list[str]:
        """Every name started, in the order first started."""
        return list(self._entries)

    def process(self, name: str):
        """The current process of ``name`` (its latest start), or None if it was never started."""
        entry = self._entries.get(name)
        return None if entry is None else entry.proc

    def returncode(self, name: str) -> int | None:
        """The exit status of ``name``'s current process (polled now); None while it runs or if never started."""
        entry = self._entries.get(name)
        if entry is None:
            return None
        self._note_exit(entry)
        return entry.proc.returncode

    def alive(self, name: str) -> bool:
        """Whether ``name`` was started and its current process still runs (polled now)."""
        return name in self._entries and self.returncode(name) is None

    def exited_at(self, name: str) -> float | None:
        """When (time.time()) the group first saw ``name``'s current process exited; None before."""
        entry = self._entries.get(name)
        return None if entry is None else entry.exited_at

    # Watching.
    def add_reader(self, fileobj, callback: Callable[[], None]) -> None:
        """Calls ``callback()`` from poll(), wait() and drain() whenever ``fileobj`` (or fd) is readable."""
        self._selector.register(fileobj, selectors.EVENT_READ, ("reader", callback))

    def remove_reader(self, fileobj) -> None:
        try:
            self._selector.unregister(fileobj)
        except (KeyError, ValueError):
            pass

    def add_pipe(self, fileobj, on_data: Callable[[bytes], None]) -> None:
        """Reads ``fileobj`` (a task's stdout or stderr pipe) as data arrives: ``on_data(chunk)``, then
        ``on_data(b"")`` at its end, when the group closes it. The group closes it on close() too."""

        def read() -> None:
            try:
                data = os.read(fileobj.fileno(), _READ_BYTES)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            on_data(data)
            if not data:
                self.remove_reader(fileobj)
                self._pipes.discard(fileobj)
                fileobj.close()

        self._pipes.add(fileobj)
        self.add_reader(fileobj, read)

    def poll(self, timeout: float) -> list[str]:
        """Waits at most ``timeout`` seconds for an exit or a readable fd, runs the readers' callbacks,
        and returns the names whose processes exited since the last poll (each exit once).

        Returns at once when an exit seen elsewhere (alive(), stop(), ...) is not reported yet.
        """
        unreported = any(e.exited_at is not None and not e.reported for e in self._entries.values())
        self._wait_once(0.0 if unreported else timeout)
        exited = []
        for name, entry in self._entries.items():
            if self._note_exit(entry) and not entry.reported:
                entry.reported = True
                exited.append(name)
        return exited

    def wait(self, names: Iterable[str], deadline: float, *, stop_at_failure: bool = False) -> dict[str, int | None]:
        """Waits until every process of ``names`` has exited, or (``stop_at_failure``) one exited with a
        non-zero status, or time.monotonic() passes ``deadline``. Returns name -> status (None: running).

        Readers' callbacks run meanwhile; exits seen here are still reported by the next poll().
        """
        names = list(names)
        while True:
            codes = {name: self.returncode(name) for name in names}
            if all(code is not None for code in codes.values()):
                return codes
            if stop_at_failure and any(code not in (None, 0) for code in codes.values()):
                return codes
            left = deadline - time.monotonic()
            if left <= 0:
                return codes
            self._wait_once(left)

    def drain(self, deadline: float) -> bool:
        """Runs the readers until every pipe from add_pipe has reached its end, or time.monotonic() passes
        ``deadline``; returns whether they all ended. Exits seen here are still reported by the next poll()."""
        while self._pipes:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._wait_once(left)
        return True

    # Stopping.
    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Sends ``sig`` at once to ``name``'s process, its process group and its descendants."""
        lifecycle.kill_tree(self._entries[name].proc, sig)

    def stop(self, names: Iterable[str] | None = None, grace_secs: float | None = None) -> None:
        """Stops ``names`` (default: every name) and their descendants: SIGTERM, ``grace_secs`` (default:
        the group's ``stop_grace_secs``), SIGKILL; returns once they are reaped (lifecycle.stop_trees)."""
        entries = [self._entries[name] for name in (self._entries if names is None else names)]
        grace = self._stop_grace_secs if grace_secs is None else grace_secs
        lifecycle.stop_trees([entry.proc for entry in entries], grace)
        for entry in entries:
            self._note_exit(entry)

    def close(self) -> None:
        """Stops every process still alive and every descendant (with ``stop_grace_secs``), then closes
        the pidfds, the pipes from add_pipe and the selector. Safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        try:
            self.stop()
        finally:
            for entry in self._entries.values():
                self._drop_pidfd(entry)
            for pipe in self._pipes:
                pipe.close()
            self._pipes.clear()
            self._selector.close()

    # Inside.
    def _wait_once(self, timeout: float) -> None:
        """One bounded wait on the selector; runs the callbacks of the readers that are readable."""
        if any(e.exited_at is None and e.pidfd is None for e in self._entries.values()):
            timeout = min(timeout, FALLBACK_POLL_SECS)
        for key, _ in self._selector.select(timeout=max(0.0, timeout)):
            kind, data = key.data
            if kind == "exit":
                # Noted now, its pidfd leaves the selector: a readable pidfd would wake every later wait at once.
                self._note_exit(self._entries[data])
            # An earlier callback of this batch may have removed this reader.
            elif self._selector.get_map().get(key.fd) is key:
                data()

    def _note_exit(self, entry: _Entry) -> bool:
        """Whether the process has exited; the first time it is seen so, records when and closes its pidfd."""
        if entry.exited_at is None and entry.proc.poll() is not None:
            entry.exited_at = time.time()
            self._drop_pidfd(entry)
        return entry.exited_at is not None

    def _drop_pidfd(self, entry: _Entry) -> None:
        if entry.pidfd is not None:
            if self._selector.get_map() is not None:  # None once the selector is closed
                self._selector.unregister(entry.pidfd)
            os.close(entry.pidfd)
            entry.pidfd = None
