"""Free loopback ports for local clusters, reserved so concurrent launches never clash.

Ports are drawn below the kernel's ephemeral range, so that no outgoing
connection (gRPC clients open many) takes one between choice and bind. Each
chosen port is probed on every interface (TensorFlow binds them all) and then
claimed with an exclusive lock on a file in this user's private ``ports/``
folder (ps_toolkit.base.paths), which this user's other launches respect. The claim
lasts until ``release()``, which deletes the file, or the owner's death: a file
left by a killed launcher holds no lock and is reclaimed (deleted) by the next
reservation. Launches of other users are told apart by the bind probe alone.
"""

from __future__ import annotations

import fcntl
import os
import random
import socket

from ps_toolkit.base import paths

_FALLBACK_RANGE = (20000, 32767)


def _port_range() -> tuple[int, int]:
    """Ports from 10000 up to the start of the ephemeral range."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as handle:
            low = int(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return _FALLBACK_RANGE
    return (10000, low - 1) if low > 11000 else _FALLBACK_RANGE


def port_is_free(port: int) -> bool:
    """True if nothing listens on ``port`` on any interface."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("", port))
        except OSError:
            return False
    return True


class PortReservation:
    """Ports claimed for one launch. Use as a context manager or call release()."""

    def __init__(self, ports: list[int], lock_files: list):
        self.ports = ports
        self._lock_files = lock_files

    def release(self) -> None:
        for path, fd in self._lock_files:
            _unlock_and_remove(path, fd)
        self._lock_files = []

    def __enter__(self) -> PortReservation:
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()


def reserve_ports(
    count: int, *, rng: random.Random | None = None, attempts: int = 2000, lock_dir: str | None = None
) -> PortReservation:
    """Claims ``count`` distinct free ports. Raises RuntimeError if it cannot."""
    rng = rng or random.Random()
    low, high = _port_range()
    lock_dir = lock_dir or paths.state_subdir("ports")
    reclaim_stale_locks(lock_dir)
    ports, handles = [], []
    for _ in range(attempts):
        if len(ports) == count:
            break
        port = rng.randint(low, high)
        if port in ports:
            continue
        path = os.path.join(lock_dir, f"{port}.lock")
        fd = _try_lock(path)
        if fd is None:
            continue
        if not port_is_free(port):
            _unlock_and_remove(path, fd)
            continue
        ports.append(port)
        handles.append((path, fd))
    if len(ports) < count:
        for path, fd in handles:
            _unlock_and_remove(path, fd)
        raise RuntimeError(f"could not find {count} free ports in {low}-{high} after {attempts} tries")
    return PortReservation(ports, handles)


def port_is_reserved(port: int, lock_dir: str | None = None) -> bool:
    """True while a live reservation of this user holds ``port``."""
    path = os.path.join(lock_dir or paths.state_subdir("ports"), f"{port}.lock")
    if not os.path.lexists(path):
        return False
    fd = _try_lock(path, create=False)
    if fd is None:
        return os.path.lexists(path)
    _unlock_and_remove(path, fd)
    return False


def reclaim_stale_locks(lock_dir: str) -> list[str]:
    """Deletes lock files no live process holds (left by a killed launcher); returns their paths."""
    reclaimed = []
    for name in os.listdir(lock_dir):
        if not name.endswith(".lock"):
            continue
        path = os.path.join(lock_dir, name)
        fd = _try_lock(path, create=False)
        if fd is not None:
            _unlock_and_remove(path, fd)
            reclaimed.append(path)
    return reclaimed


def _try_lock(path: str, *, create: bool = True) -> int | None:
    """An fd holding an exclusive lock on ``path``, or None if another process holds it.

    The lock counts only if ``path`` still names the locked file afterwards:
    its holder may have deleted it (release) between our open and our lock.
    """
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_CREAT if create else 0)
    try:
        fd = os.open(path, flags, 0o600)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.fstat(fd).st_ino != os.stat(path, follow_symlinks=False).st_ino:
            raise FileNotFoundError(path)
    except OSError:
        os.close(fd)
        return None
    return fd


def _unlock_and_remove(path: str, fd: int) -> None:
    """Deletes the lock file while still holding its lock, then drops the lock."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    os.close(fd)
