"""One private network namespace per loopback cluster, shared by its hand-started tasks, made without root.

Design: docs/design.md, "One start-up, and keeping the ports private".
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import hashlib
import os
import selectors
import socket
import struct
import subprocess
import sys

from ps_toolkit.base import paths
from ps_toolkit.network.netns import PRIVATE_NETWORK_ENV

# Set in a process re-executed to join: the fd of its connection to the keeper.
MEMBER_FD_ENV = "PS_TOOLKIT_NETNS_MEMBER_FD"
# Set instead when the re-executed join failed: why, so the task falls back to the rules or the refusal.
JOIN_FAILED_ENV = "PS_TOOLKIT_NETNS_JOIN_FAILED"
_KEEPER_START_TIMEOUT_SECS = 20.0
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
# This process's connection to its keeper: open until the process ends.
_membership: list[socket.socket] = []


class JoinFailed(Exception):
    """No shared namespace for this cluster; the message says what is missing and how to enable it."""


def cluster_key(addresses: list[str]) -> str:
    """The same for every task that names the same addresses, in any order."""
    return hashlib.sha256("\n".join(sorted(set(addresses))).encode()).hexdigest()[:20]


def joined() -> bool:
    return os.environ.get(PRIVATE_NETWORK_ENV) == "1"


def join(key: str) -> None:
    """Moves this process (one thread) into the cluster's namespace, starting its keeper if needed.

    Raises JoinFailed (nothing changed) when no keeper can be started or joined.
    """
    folder = paths.state_subdir("netns")
    lock_path = os.path.join(folder, f"{key}.lock")
    socket_path = os.path.join(folder, f"{key}.sock")
    lock = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        member = _connect(socket_path) or _start_keeper(socket_path, lock_path)
        try:
            _enter(_peer_pid(member))
        except OSError as err:
            member.close()
            raise JoinFailed(f"cannot join the cluster's network namespace: {err.strerror or err}") from None
    finally:
        os.close(lock)  # releases the lock
    _membership.append(member)
    os.environ[PRIVATE_NETWORK_ENV] = "1"


def join_by_reexec(key: str) -> None:
    """For a process with threads: executes this module to join, then this same command line; never returns."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, _python_c("cluster_netns", "_reexec_main(sys.argv)", key, "--", *sys.orig_argv))


def _python_c(module: str, call: str, *args: str) -> list[str]:
    """``python -c`` calling ``call`` of ps_toolkit.network's ``module``, found where this process found it."""
    code = f"import sys; sys.path.insert(0, {paths.PACKAGE_PARENT!r}); from ps_toolkit.network import {module}; "
    return [sys.executable, "-c", code + f"{module}.{call}", *args]


def adopt_inherited_membership() -> None:
    """In a re-executed task: keeps the keeper's connection out of the processes it starts."""
    fd = os.environ.pop(MEMBER_FD_ENV, None)
    if fd is not None and fd.isdigit():
        try:
            os.set_inheritable(int(fd), False)
        except OSError:
            pass


def _connect(socket_path: str) -> socket.socket | None:
    """A connection to the cluster's live keeper, or None (none, or a dead one's socket: removed)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with paths.socket_address(socket_path) as address:
            sock.connect(address)
    except (FileNotFoundError, ConnectionRefusedError):
        sock.close()
        try:
            os.unlink(socket_path)
        except FileNotFoundError:
            pass
        return None
    return sock


def _start_keeper(socket_path: str, lock_path: str) -> socket.socket:
    """Starts a keeper (in a session of its own: Ctrl-C of the first task's terminal does not reach it)."""
    command = _python_c("netns_keeper", "main(sys.argv[1:])", socket_path, lock_path)
    keeper = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        text=True,
    )
    with selectors.DefaultSelector() as selector:
        selector.register(keeper.stdout, selectors.EVENT_READ)
        ready = selector.select(_KEEPER_START_TIMEOUT_SECS)
    silent = f"failed: no answer within {_KEEPER_START_TIMEOUT_SECS:.0f}s"
    answer = keeper.stdout.readline().strip() if ready else silent
    keeper.stdout.close()
    if answer != "ready":
        keeper.kill()
        keeper.wait(timeout=_KEEPER_START_TIMEOUT_SECS)
        raise JoinFailed(answer.removeprefix("failed: ") or "the keeper ended at start")
    member = _connect(socket_path)
    if member is None:
        raise JoinFailed("the keeper started but does not answer on its socket")
    return member


def _peer_pid(member: socket.socket) -> int:
    """The keeper's pid, from the kernel (SO_PEERCRED), checked to be this user's process."""
    pid, uid, _gid = struct.unpack("3i", member.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    if uid != os.getuid():
        raise JoinFailed(f"the keeper's socket is served by uid {uid}, not by you")
    return pid


def _enter(pid: int) -> None:
    """setns() into the keeper's user namespace (where it differs from ours), then its network namespace."""
    for kind, flag in (("user", _CLONE_NEWUSER), ("net", _CLONE_NEWNET)):
        fd = os.open(f"/proc/{pid}/ns/{kind}", os.O_RDONLY | os.O_CLOEXEC)
        try:
            if os.fstat(fd).st_ino == os.stat(f"/proc/self/ns/{kind}").st_ino:
                continue
            if _LIBC.setns(fd, flag) != 0:
                number = ctypes.get_errno()
                raise OSError(number, f"setns({kind}) into the keeper's namespace: {os.strerror(number)}")
        finally:
            os.close(fd)


def _reexec_main(argv: list[str]) -> None:
    """``python -c ... KEY -- COMMAND...``: join, then execute COMMAND (an interpreter's argv)."""
    key, command = argv[1], argv[3:]
    env = dict(os.environ)
    try:
        join(key)
        member = _membership[-1]
        os.set_inheritable(member.fileno(), True)  # held by the re-executed task for its whole life
        env[PRIVATE_NETWORK_ENV] = "1"
        env[MEMBER_FD_ENV] = str(member.fileno())
    except (JoinFailed, OSError) as err:
        env[JOIN_FAILED_ENV] = str(err) or type(err).__name__
    os.execve(sys.executable, command, env)
