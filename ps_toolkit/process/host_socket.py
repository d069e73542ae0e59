"""The host's fork server's socket: made where only its user can reach it, and answering while the server imports.

``listen`` makes the socket (refusing a folder others can write, replacing a
socket another user planted); ``accept_own`` takes this user's clients only.

Importing TensorFlow takes seconds to minutes; a client cannot tell a server
that is importing from one that is stopped or hung unless something answers.
While the server imports, a thread of its own accepts each client of its user
and sends ``{"importing": PID}``; the thread is joined before the imports are
checked and before any fork (a fork with a second thread alive is unsafe), and
the clients it accepted are handed to the server, which sends them ``ready``.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import stat
import threading
from collections.abc import Iterator

from ps_toolkit.base import paths
from ps_toolkit.process import fork_protocol, server_trust

_POLL_SECS = 0.2
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
            probe.connect(path)
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
        listener.bind(path)
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
    """While the ``with`` body runs, accepts and greets clients, adding them to ``accepted``."""
    done = threading.Event()

    def greet() -> None:
        while not done.is_set():
            readable, _, _ = select.select([listener], [], [], _POLL_SECS)
            sock = accept_own(listener) if readable else None
            if sock is None:
                continue
            with contextlib.suppress(OSError):
                sock.send(fork_protocol.encode({"importing": os.getpid()}), socket.MSG_DONTWAIT)
            accepted.append(sock)

    thread = threading.Thread(target=greet, name="fork_greeter", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
