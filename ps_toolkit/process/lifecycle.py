"""Starting task processes that die with their parent, and stopping whole process trees.

Every task runs in its own session (so its own process group, and a Ctrl-C at
the terminal reaches only the launcher, which then stops the tasks in order)
and carries ``PR_SET_PDEATHSIG``: if the process that started it dies, even by
SIGKILL, the kernel kills the task too. Stopping a task is SIGTERM to its
process group, every descendant and every process still in its session (an
orphan re-parented to init keeps the session), a grace period, then SIGKILL of
whatever is left. What a task started outlives a SIGKILLed launcher only until
``RunReaper`` notices (see ``run_reaper``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence

import psutil

from ps_toolkit.process import run_reaper

_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _die_with_parent(parent_pid: int):
    """A preexec_fn: ask the kernel to SIGKILL this child when its parent goes."""

    def preexec() -> None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # The parent may have died between fork() and prctl(): nobody would tell us.
        if os.getppid() != parent_pid:
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


class TaskPopen(subprocess.Popen):
    """A ``Popen`` with the task-process interface's ``lost_with`` (starter.TaskProcess).

    Nothing but the task itself ends an exec'd task: its ``lost_with`` is always None.
    """

    lost_with = None


def spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    stdout,
    stderr,
    cwd: str | None = None,
    text: bool = False,
    pass_fds: Sequence[int] = (),
) -> TaskPopen:
    """Starts ``argv`` in a new session; it is killed if this thread's process dies.

    PR_SET_PDEATHSIG fires when the *thread* that forked the child ends, so
    call this from a thread that lives as long as the task should (the main
    thread, in the launcher).
    """
    return TaskPopen(
        list(argv),
        env=dict(env),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        start_new_session=True,
        preexec_fn=_die_with_parent(os.getpid()),
        close_fds=True,
        pass_fds=tuple(pass_fds),
        text=text,
    )


def _tree(pid: int) -> list[psutil.Process]:
    """The process and all its descendants that are still alive."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _descendants(pids: Sequence[int]) -> list[psutil.Process]:
    """Every live process below ``pids`` or in their sessions (each task leads its own), the tasks left out."""
    found = {proc.pid: proc for pid in pids for proc in _tree(pid)[1:]}
    for pid in run_reaper.session_members(set(pids), os.getpid()):
        if pid not in found and pid not in pids:
            try:
                found[pid] = psutil.Process(pid)
            except psutil.NoSuchProcess:
                pass
    return list(found.values())


def _signal_all(pids: Iterable[int], procs: Iterable[psutil.Process], sig: int, live: Iterable[int] = ()) -> None:
    """``sig`` to the process groups ``pids`` lead and to ``procs``; a ``live`` task leading no group yet
    (a forked task before its setsid) gets it directly."""
    live = set(live)
    for pid in pids:
        try:
            os.killpg(pid, sig)  # each task leads its own process group
        except ProcessLookupError:
            if pid in live:
                _signal_pid(pid, sig)
        except PermissionError:
            pass
    for proc in procs:
        try:
            proc.send_signal(sig)
        except psutil.Error:
            pass


def _signal_pid(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_tree(popen: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    """Sends ``sig`` at once to a task, its process group and its descendants."""
    if popen.poll() is None:
        _signal_all([popen.pid], _descendants([popen.pid]), sig, live=[popen.pid])


def stop_trees(popens: Sequence[subprocess.Popen], grace_secs: float) -> None:
    """Stops tasks: SIGTERM to each tree, ``grace_secs`` to exit, then SIGKILL.

    Returns once every task has been reaped (its returncode is set) and every
    descendant has gone, or after the SIGKILL wait bound.
    """
    live = [p for p in popens if p.poll() is None]
    # Descendants of tasks that already exited may linger in their group and session.
    groups = [p.pid for p in popens]
    descendants = _descendants(groups)
    live_pids = [p.pid for p in live]
    _signal_all(groups, descendants, signal.SIGTERM, live_pids)
    deadline = time.monotonic() + grace_secs
    _reap(live, deadline)
    _, survivors = psutil.wait_procs(descendants, timeout=max(0.0, deadline - time.monotonic()))
    _signal_all(groups, survivors, signal.SIGKILL, [p.pid for p in live if p.poll() is None])
    # SIGKILL cannot be refused; the bound only guards against a kernel stuck in I/O.
    kill_deadline = time.monotonic() + 10.0
    _reap(live, kill_deadline)
    psutil.wait_procs(survivors, timeout=max(0.0, kill_deadline - time.monotonic()))


class RunReaper:
    """The run's reaper process (``run_reaper``): tell it each task's pid; it kills their sessions when we go.

    Example:
        reaper = RunReaper()
        reaper.add(task.pid)     # after each start
        reaper.close()           # at the end of the run: it checks the sessions and exits
    """

    def __init__(self):
        # Its own session: a Ctrl-C at the terminal is for the launcher, which stops the tasks itself.
        self._process = subprocess.Popen(
            [sys.executable, "-I", run_reaper.__file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )

    def add(self, pid: int) -> None:
        try:
            self._process.stdin.write(b"%d\n" % pid)
            self._process.stdin.flush()
        except OSError:  # it has gone; the tasks still die with their parent
            pass

    def close(self, timeout_secs: float = 10.0) -> None:
        try:
            self._process.stdin.close()
        except OSError:
            pass
        try:
            self._process.wait(timeout=timeout_secs)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


def _reap(popens: Sequence[subprocess.Popen], deadline: float) -> None:
    for popen in popens:
        try:
            popen.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass


def pid_fd(popen: subprocess.Popen) -> int | None:
    """A pidfd that becomes readable when the task exits (Linux 5.3+), or None."""
    try:
        return os.pidfd_open(popen.pid)
    except (AttributeError, OSError):
        return None


def usage(popens: Iterable[subprocess.Popen], cache: dict[int, psutil.Process]) -> tuple[float, int]:
    """CPU percent and resident bytes of the tasks' trees, summed.

    ``cache`` keeps psutil.Process objects between calls: cpu_percent() measures
    since the previous call on the same object.
    """
    cpu, rss = 0.0, 0
    seen = set()
    for popen in popens:
        if popen.poll() is not None:
            continue
        for proc in _tree(popen.pid):
            proc = cache.setdefault(proc.pid, proc)
            seen.add(proc.pid)
            try:
                cpu += proc.cpu_percent(None)
                rss += proc.memory_info().rss
            except psutil.Error:
                pass
    for pid in set(cache) - seen:
        del cache[pid]
    return cpu, rss
