"""The host's fork server answering while it imports: each client is told at once that a server is there.

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
import threading
from collections.abc import Iterator

from ps_toolkit.process import fork_protocol, server_trust

_POLL_SECS = 0.2


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
