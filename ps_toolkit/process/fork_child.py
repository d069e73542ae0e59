"""A child of the fork server becoming one task: ``python SCRIPT ARGS`` (or ``python -m MODULE ARGS``), as exec would.

What a fresh ``processes.spawn`` of that command gets, the child sets up
itself, in this order and before any thread starts: its own session (so its
own process group, which the launcher signals), death with the fork server
(PR_SET_PDEATHSIG), stdin from /dev/null and the client's stdout/stderr (as
Python streams that drop what a full disk has no room for: ``task.tolerant_streams``), the
client's user and network namespaces (setns, when they differ from the
server's), its working folder and environment, fresh random seeds (a forked
child would otherwise repeat the server's), its name (the script's: ``ps -e``
shows it) and command line (the task's: ``ps`` and ``pgrep -f`` show it), then ``sys.argv`` and
``sys.path`` (the task's PYTHONPATH folders included: python_path) and the
script run as ``__main__``. Its exit status is what ``python`` would return:
the ``SystemExit`` code, 1 after an uncaught exception (traceback on stderr),
or the script's own ``os._exit``.
"""

from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import os
import random
import runpy
import signal
import sys
import tempfile
import threading
import traceback

import setproctitle

from ps_toolkit.process import fork_protocol, python_path
from ps_toolkit.task import tolerant_streams

# setproctitle finds the room for a title (argv and the environment after it) on its first call: made
# here, in the server, before a child clears the environment it would no longer find contiguous.
setproctitle.getproctitle()

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def run(
    request: dict, fds: list[int], *, server_pid: int, close_fds: list[int], sys_path: list[str], ready_fd: int
) -> None:
    """Runs the requested command in this (just forked) process and ends it; never returns.

    ``sys_path`` is the server's, with the task's PYTHONPATH folders where python puts them.
    A byte on ``ready_fd`` tells the server this process leads its own session: the
    server gives its pid to nobody before (a kill of its group would miss it).
    """
    code = 1
    try:
        _detach(server_pid)
        os.write(ready_fd, b"1")
        os.close(ready_fd)
        for fd in close_fds:
            os.close(fd)
        given = dict(zip(fork_protocol.FD_ORDER, fds, strict=False))
        _redirect(given["stdout"], given["stderr"])
        _enter_namespaces(given.get("user_ns"), given.get("net_ns"))
        for fd in fds:
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        # Read from TMPDIR once and cached: the server's value would outlive the task's environment.
        tempfile.tempdir = None
        sys.path[:] = sys_path
        _reseed()
        _set_name(request["argv"])
        code = _run_python(request["argv"])
    except BaseException:  # the child must end here, whatever happened, with the cause on its stderr
        traceback.print_exc()
    _exit(code)


def _detach(server_pid: int) -> None:
    os.setsid()
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # The server may have died between fork() and prctl(): nobody would tell us.
    if os.getppid() != server_pid:
        os.kill(os.getpid(), signal.SIGKILL)


def _redirect(stdout: int, stderr: int) -> None:
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(stdout, 1)
    os.dup2(stderr, 2)
    tolerant_streams.install()


def _enter_namespaces(user_ns: int | None, net_ns: int | None) -> None:
    """Joins the client's namespaces where they are not already this process's (a single thread here)."""
    for fd, kind, flag in ((user_ns, "user", _CLONE_NEWUSER), (net_ns, "net", _CLONE_NEWNET)):
        if fd is None or os.fstat(fd).st_ino == os.stat(f"/proc/self/ns/{kind}").st_ino:
            continue
        if _LIBC.setns(fd, flag) != 0:
            raise OSError(ctypes.get_errno(), f"setns into the launcher's {kind} namespace failed")


def _set_name(argv: list[str]) -> None:
    """Names the process after its script (what ps -e and psutil's name() show) and gives it the task's
    command line (what ps, top and pgrep -f show; the task's start-up then puts its role first)."""
    setproctitle.setproctitle(" ".join(argv))
    name = argv[2] if argv[1] == "-m" else os.path.basename(argv[1])
    _LIBC.prctl(_PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)


def _reseed() -> None:
    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def _run_python(argv: list[str]) -> int:
    """``argv`` is [python, SCRIPT, ARGS...] or [python, -m, MODULE, ARGS...]."""
    # What exec would give: a task that executes itself again (to join its cluster's network
    # namespace, ps_toolkit/network/cluster_netns.py) runs this command, not the fork server's.
    sys.orig_argv = list(argv)
    try:
        if argv[1] == "-m":
            sys.argv = [argv[2], *argv[3:]]
            if not python_path.SAFE_PATH:  # python -P puts no folder of its own first
                sys.path[0] = os.getcwd()
            runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
        else:
            sys.argv = argv[1:]
            if not python_path.SAFE_PATH:
                sys.path[0] = os.path.dirname(os.path.realpath(argv[1]))
            runpy.run_path(argv[1], run_name="__main__")
        return 0
    except SystemExit as done:
        return _exit_code(done.code)
    except KeyboardInterrupt:
        _finish()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        return 130
    except BaseException:
        traceback.print_exc()
        return 1


def _exit_code(code) -> int:
    """The status ``python`` exits with for ``sys.exit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _finish() -> None:
    """What the interpreter does before it exits: non-daemon threads joined, atexit run, output flushed."""
    try:
        threading._shutdown()
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass


def _exit(code: int) -> None:
    try:
        _finish()
    finally:
        os._exit(code)
