"""The host's fork server's socket: made where only its user can reach it, and answering while the server imports.

``listen`` makes the socket (refusing a folder others can write, replacing a
socket another user planted); ``accept_own`` takes this user's clients only.

Importing TensorFlow takes seconds to minutes; a client cannot tell a server
that is importing from one that is stopped or hung unless something answers.
While the server imports, a child process forked before the imports accepts
each client of its user, sends ``{"importing": PID}`` and hands the client's
socket to the server (SCM_RIGHTS); once the imports are done the child ends
and the server sends those clients ``ready``.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import stat
from collections.abc import Iterator

from ps_toolkit.base import paths
from ps_toolkit.process import fork_protocol, server_trust

# How long a probe of an existing socket waits for its listener.
_PROBE_SECS = 10.0


def listen(path: str) -> socket.socket:
    """A listening socket at ``path`` that only this user can reach; ValueError when another server of this
    user holds it, or when ``path`` is in a folder others can write (a client would refuse it)."""
    refusal = server_trust.folder_refusal(os.path.dirname(os.path.abspath(path)))
    if refusal:
        raise ValueError(refusal)
    if os.path.lexists(path):
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise ValueError(f"{path} exists and is not a socket")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        probe.settimeout(_PROBE_SECS)
        try:
            with paths.socket_address(path) as address:
                probe.connect(address)
            ours = server_trust.peer_uid_pid(probe)[0] == os.getuid()
        except OSError:  # refused, gone, or stalled past its backlog: left by a server that died
            ours = False
        finally:
            probe.close()
        if ours:
            raise ValueError(f"a fork server already listens at {path}")
        os.unlink(path)  # a dead server's, or planted by someone else: not a server this user's launches may use
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    old_umask = os.umask(0o077)
    try:
        with paths.socket_address(path) as address:
            listener.bind(address)
    finally:
        os.umask(old_umask)
    listener.listen(64)
    return listener


def default_path() -> str:
    """Where ``--listen`` with no PATH puts the socket: the per-user state folder, which only this user can write."""
    return os.path.join(paths.state_dir(), "fork_server.sock")


def accept_own(listener: socket.socket) -> socket.socket | None:
    """The next client if it is a process of this user, else None (another user's is closed unanswered)."""
    try:
        sock, _ = listener.accept()
    except OSError:
        return None
    if server_trust.peer_uid_pid(sock)[0] != os.getuid():
        sock.close()
        return None
    return sock


@contextlib.contextmanager
def greeting(listener: socket.socket, accepted: list[socket.socket]) -> Iterator[None]:
    """While the ``with`` body runs, a child process accepts and greets clients; their sockets are then
    added to ``accepted``.

    A process, not a thread: an import holds the GIL for seconds at a time (loading
    TensorFlow's libraries), and a forked server must have no thread of its own.
    """
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the greeter child; it ends in _greet
        ours.close()
        _greet(listener, theirs)
    theirs.close()
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            ours.send(b"stop")
        while True:  # every client it accepted, then end of file once it has exited
            try:
                _, fds, _, _ = socket.recv_fds(ours, 16, 1)
            except OSError:
                break
            if not fds:
                break
            accepted.append(socket.socket(fileno=fds[0]))
        ours.close()
        os.waitpid(pid, 0)


def _greet(listener: socket.socket, parent: socket.socket) -> None:
    """The greeter child: accept, say "importing", hand the client to the server; until the server says stop
    (or goes: end of file)."""
    code = 0
    try:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_DFL)
        server_pid = os.getppid()
        while True:
            readable, _, _ = select.select([listener, parent], [], [])
            if parent in readable:
                parent.recv(16)  # read, so that its closing is a plain end of file to the server
                break
            sock = accept_own(listener)
            if sock is None:
                continue
            with contextlib.suppress(OSError):
                sock.send(fork_protocol.encode({"importing": server_pid}), socket.MSG_DONTWAIT)
            socket.send_fds(parent, [b"c"], [sock.fileno()])
            sock.close()
    except BaseException:  # noqa: BLE001 - the child ends here, whatever happened; the server accepts on
        code = 1
    os._exit(code)
