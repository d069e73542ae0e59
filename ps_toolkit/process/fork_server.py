"""The fork server: one process that imports TensorFlow once, then forks each task from that state.

    python -m ps_toolkit.process.fork_server FD [MODULE ...]     # a launch's own server (fork_client starts it)
    python -m ps_toolkit.process.fork_server --listen PATH      # the host's server, shared by every launch

Importing TensorFlow costs seconds of CPU; a cluster of N local tasks started
fresh pays it N times. This process pays it once: it imports TensorFlow and what
the registered task entries need (``task_entries.preload``; plus any MODULE given), then
answers requests on the Unix socket FD. Each ``fork`` request makes a child
that runs one Python command exactly as ``python SCRIPT ARGS`` would (see
``fork_child``), and each child's exit status is sent back when it ends.

When forking is unsafe (``fork_service``'s guard), the server answers
``refused`` with the reason and the client starts its tasks with exec.

Messages are JSON objects, one per SOCK_SEQPACKET datagram (fork_protocol).
A launch's own server ends when its client closes the socket, SIGKILLing any
child still running; it dies with the process that started it
(PR_SET_PDEATHSIG), and its children die with it.

The host's server (``--listen PATH``) pays the import once for every launch
on the host: each launch whose environment names it (``PS_TOOLKIT_FORK_SERVER``,
fork_client) connects to it instead of starting its own. It serves each client
as a launch's own server would: when a client goes, however it goes, its
tasks are SIGKILLed. Only processes of this server's user may connect, and its
socket must lie in a folder only that user can write (``host_socket``); while it
imports, it tells each client so at once (a client bypasses a silent server). It
prints a line once it listens (or why it cannot: exit 2), one once its
imports are done (clients that connect before wait for them), and serves
until SIGTERM or SIGINT, which end its tasks and remove PATH.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.process import fork_protocol, host_socket
from ps_toolkit.process.fork_service import ForkService

# How long the one refusal of a server that cannot fork waits for its client to read it.
_SEND_TIMEOUT_SECS = 10.0
# What ends the listening server.
_SERVER_END_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _end_on_signal(signum, _frame) -> None:
    raise SystemExit(128 + signum)


def _serve_socket_pair(fd: int, modules: list[str]) -> int:
    sock = socket.socket(fileno=fd)
    server = ForkService()
    try:
        refusal = server.prepare(modules)
        if refusal:
            sock.settimeout(_SEND_TIMEOUT_SECS)
            with contextlib.suppress(OSError):
                sock.send(fork_protocol.encode({"refused": refusal}))
            return 0
        server.serve_one(sock)
    finally:
        server.stop_children()
        sock.close()
    return 0


def _serve_at(path: str, modules: list[str]) -> int:
    """The host's server: a line on stdout once it listens (or why it cannot), one once it can fork, then
    serves until a signal."""
    # What the starter left open (a shell's descriptors) is not the tasks': 0-2 only.
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    server = ForkService()
    for signum in _SERVER_END_SIGNALS:
        signal.signal(signum, _end_on_signal)
    try:
        listener = host_socket.listen(path)
    except (OSError, ValueError) as err:
        _say(f"fork_server: cannot listen at {path}: {err}")
        return 2
    # Clients may connect from now on: they are told the server is importing, and served once it is done.
    _say(f"fork_server: listening at {path} (pid {os.getpid()}); importing TensorFlow")
    accepted: list[socket.socket] = []
    try:
        # TensorFlow's import chatter is kept off; a failed import is said in one line below.
        with _quiet_stderr(), host_socket.greeting(listener, accepted):
            refusal = server.prepare(modules)
        if refusal:
            _say(f"fork_server: {refusal}")
            return 1
        _say("fork_server: ready")
        server.serve_listening(listener, accepted)
    finally:
        for sock in accepted:
            sock.close()
        listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        server.stop_children()
        _say("fork_server: stopped; its tasks were ended and its socket removed")
    return 0


@contextlib.contextmanager
def _quiet_stderr():
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _say(line: str) -> None:
    """One status line on stdout; a reader that has gone (``| head -1``) does not end the server."""
    with contextlib.suppress(OSError):
        print(line, flush=True)


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[1] == "--listen":
        try:
            return _serve_at(host_socket.default_path(), [])
        except ConfigError as err:
            _say(f"fork_server: {err}")
            return 2
    if len(argv) >= 3 and argv[1] == "--listen" and argv[2] and not argv[2].startswith("\0"):
        return _serve_at(argv[2], argv[3:])
    if len(argv) >= 2 and argv[1].isdigit():
        return _serve_socket_pair(int(argv[1]), argv[2:])
    help_asked = len(argv) == 2 and argv[1] in ("-h", "--help")
    (sys.stdout if help_asked else sys.stderr).write(_USAGE)
    return 0 if help_asked else 2


_USAGE = """\
usage: python -m ps_toolkit.process.fork_server --listen [PATH [MODULE ...]]
  Imports TensorFlow once, then forks the tasks of every launch whose environment has
  PS_TOOLKIT_FORK_SERVER=PATH (absolute, so that launches from any folder find it; only this
  user can connect, and PATH must be in a folder only this user can write). Without PATH it
  listens at $TMPDIR/ps_toolkit-<uid>/fork_server.sock, the per-user state folder. MODULEs are
  imported too, before the first fork. SIGTERM or SIGINT end it and its tasks.
  (python -m ps_toolkit.process.fork_server FD [MODULE ...] is a launch's own server, started by fork_client.)
"""


if __name__ == "__main__":
    try:
        code = main(sys.argv)
    except SystemExit as ended:  # SIGTERM or SIGINT (_end_on_signal): its status, without the slow teardown
        code = ended.code if isinstance(ended.code, int) else 1
    # Tearing down an imported TensorFlow takes seconds, and the client waits for this
    # process to end: nothing is left to flush but the standard streams.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
