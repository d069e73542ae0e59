"""Free loopback ports for local clusters, reserved so concurrent launches never clash.

Ports are drawn below the kernel's ephemeral range, so that no outgoing
connection (gRPC clients open many) takes one between choice and bind. Each
chosen port is probed on every interface (TensorFlow binds them all) and then
claimed with an exclusive lock file, which other launches on this machine
respect; the claim lasts until ``release()`` or the owner's death.
"""

from __future__ import annotations

import fcntl
import os
import random
import socket
import tempfile

LOCK_DIR = os.path.join(tempfile.gettempdir(), "ps_toolkit_ports")
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
        for handle in self._lock_files:
            handle.close()  # closing drops the flock
        self._lock_files = []

    def __enter__(self) -> PortReservation:
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()


def reserve_ports(count: int, *, rng: random.Random | None = None, attempts: int = 2000) -> PortReservation:
    """Claims ``count`` distinct free ports. Raises RuntimeError if it cannot."""
    rng = rng or random.Random()
    low, high = _port_range()
    os.makedirs(LOCK_DIR, exist_ok=True)
    ports, handles = [], []
    for _ in range(attempts):
        if len(ports) == count:
            break
        port = rng.randint(low, high)
        if port in ports:
            continue
        handle = _try_lock(port)
        if handle is None:
            continue
        if not port_is_free(port):
            handle.close()
            continue
        ports.append(port)
        handles.append(handle)
    if len(ports) < count:
        for handle in handles:
            handle.close()
        raise RuntimeError(f"could not find {count} free ports in {low}-{high} after {attempts} tries")
    return PortReservation(ports, handles)


def _try_lock(port: int):
    handle = open(os.path.join(LOCK_DIR, f"{port}.lock"), "a")  # noqa: SIM115 - held open on purpose
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        return None
    return handle
