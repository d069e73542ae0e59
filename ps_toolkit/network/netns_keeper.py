"""The keeper of a loopback cluster's private network namespace: it lives exactly as long as the cluster's tasks.

Started by the cluster's first task (cluster_netns.py) with the cluster's lock
held: it listens on the cluster's Unix socket in the user's private state
folder, moves itself into a new network namespace (an unprivileged user
namespace around it when not root) with loopback up, says ``ready`` on its
stdout, and then only counts connections. Each task connects, joins the
namespace through /proc/<keeper>/ns/, and keeps the connection for its life.
When the last connection closes (or none came within ``_FIRST_MEMBER_SECS``)
the keeper takes the lock, makes sure no task is waiting to be accepted,
removes its socket and exits; the namespace ends with its last process.
"""

from __future__ import annotations

import fcntl
import os
import selectors
import signal
import socket
import sys

from ps_toolkit.base import paths
from ps_toolkit.network import netns

# A keeper nobody joined (its starter died before connecting) goes away after this.
_FIRST_MEMBER_SECS = 60.0


def main(argv: list[str]) -> int:
    """``SOCKET_PATH LOCK_PATH``; 0 when the last member left, 1 when the namespace could not be made."""
    socket_path, lock_path = argv
    # The starter's terminal and process group are its own business; the connections say when to go.
    for number in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(number, signal.SIG_IGN)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with paths.socket_address(socket_path) as address:
            listener.bind(address)
        listener.listen(64)
        netns.enter_private_network()
    except (OSError, netns.NamespaceUnavailable) as err:
        print(f"failed: {_explain(err)}", flush=True)
        _remove(socket_path)
        return 1
    print("ready", flush=True)
    os.close(1)
    os.open(os.devnull, os.O_WRONLY)  # fd 1 again: nothing written later reaches a closed pipe
    _keep(listener, socket_path, lock_path)
    return 0


def _keep(listener: socket.socket, socket_path: str, lock_path: str) -> None:
    members: set[socket.socket] = set()
    with selectors.DefaultSelector() as selector:
        selector.register(listener, selectors.EVENT_READ)
        timeout = _FIRST_MEMBER_SECS
        while True:
            events = selector.select(timeout)
            for key, _ in events:
                if key.fileobj is listener:
                    member, _ = listener.accept()
                    members.add(member)
                    selector.register(member, selectors.EVENT_READ)
                elif not _still_open(key.fileobj):
                    selector.unregister(key.fileobj)
                    members.discard(key.fileobj)
                    key.fileobj.close()
            timeout = None
            if not members and _stop_unless_joining(listener, socket_path, lock_path):
                return


def _still_open(member: socket.socket) -> bool:
    try:
        return bool(member.recv(64))  # members send nothing; b"" or an error: the task has ended
    except OSError:
        return False


def _stop_unless_joining(listener: socket.socket, socket_path: str, lock_path: str) -> bool:
    """Under the cluster's lock: True (socket removed) when no task is waiting to be accepted."""
    lock = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with selectors.DefaultSelector() as selector:
            selector.register(listener, selectors.EVENT_READ)
            if selector.select(0):
                return False  # a task connected before we took the lock: it is joining
        _remove(socket_path)
        return True
    finally:
        os.close(lock)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _explain(err: Exception) -> str:
    """What is missing, and how to enable it, in one line."""
    text = str(err)
    if isinstance(err, netns.NamespaceUnavailable):
        text += (
            "; if unprivileged user namespaces are disabled, enable them with "
            "'sysctl -w kernel.unprivileged_userns_clone=1' (Debian) or "
            "'sysctl -w user.max_user_namespaces=15000', or "
            "'sysctl -w kernel.apparmor_restrict_unprivileged_userns=0' (Ubuntu 24.04)"
        )
    return text


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
