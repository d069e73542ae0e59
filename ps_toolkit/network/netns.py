"""Moves this process into a private network namespace with only loopback, unreachable from outside.

TensorFlow's gRPC servers listen on every interface without authentication.
A process that calls ``enter_private_network()`` before starting its tasks
gives them a network of their own: a loopback interface that no other
namespace can reach, while the tasks still reach each other on 127.0.0.1.

The namespace is anonymous: no ``ip netns`` entry names it, so it ends with
the last process inside it, whatever way they end (SIGKILL included).
As root it is a plain network namespace; otherwise a user namespace that maps
only our own uid and gid, with a network namespace inside it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import os
import socket
import struct

# The variable a launcher sets for its tasks, so they can tell their port is private.
PRIVATE_NETWORK_ENV = "PS_TOOLKIT_PRIVATE_NETWORK"

_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFREQ = "16sH22x"  # struct ifreq: the name, then ifr_flags at the start of a 24-byte union
_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class NamespaceUnavailable(Exception):
    """No private network namespace can be made here; this process's network is unchanged."""


def enter_private_network() -> str:
    """Moves the calling thread (call it from the main thread) into a new namespace; says which kind.

    Processes started afterwards from this thread inherit it. Raises
    NamespaceUnavailable, with the reasons in one line, when the kernel or
    the privileges do not allow one; nothing has changed then.

    Example:
        try:
            kind = enter_private_network()   # 'network namespace' as root
        except NamespaceUnavailable as err:
            print(f"warning: {err}")
    """
    try:
        _enter_network_namespace()
        return "network namespace"
    except OSError as err:
        plain = f"no network namespace ({_describe(err)})"
    try:
        _probe_in_child(_enter_user_and_network_namespaces)
        _enter_user_and_network_namespaces()
    except OSError as err:
        raise NamespaceUnavailable(f"{plain}, and no user namespace with one ({_describe(err)})") from None
    return "user + network namespace"


class _HalfEntered(RuntimeError):
    """unshare() worked but the namespace cannot be set up, and a user namespace cannot be left."""


def _enter_network_namespace() -> None:
    """As root: a new network namespace, or the old one back if its loopback cannot come up."""
    original = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        _unshare(_CLONE_NEWNET, "unshare(CLONE_NEWNET)")
        try:
            _loopback_up()
        except OSError:
            if _LIBC.setns(original, _CLONE_NEWNET) != 0:
                raise RuntimeError("cannot return to the original network namespace") from None
            raise
    finally:
        os.close(original)


def _enter_user_and_network_namespaces() -> None:
    """Without root: a user namespace mapping only our ids (so tasks keep them), a network one inside."""
    uid, gid = os.geteuid(), os.getegid()
    _unshare(_CLONE_NEWUSER | _CLONE_NEWNET, "unshare(CLONE_NEWUSER|CLONE_NEWNET)")
    try:
        # The kernel lets an unprivileged process map its own ids only after setgroups is denied.
        for name, text in (("setgroups", "deny"), ("gid_map", f"{gid} {gid} 1"), ("uid_map", f"{uid} {uid} 1")):
            with open(f"/proc/self/{name}", "w", encoding="ascii") as handle:
                handle.write(text)
        _loopback_up()
    except OSError as err:
        raise _HalfEntered(f"in a new user namespace that cannot be set up: {_describe(err)}") from err


def _probe_in_child(enter) -> None:
    """Runs ``enter`` in a forked child first: a user namespace, once entered, cannot be left."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one thread, as unshare(CLONE_NEWUSER) needs
        status = 0
        try:
            os.close(read_end)
            enter()
        except BaseException as err:  # every failure goes back to the parent as text
            os.write(write_end, (_describe(err) if isinstance(err, OSError) else str(err)).encode()[:512])
            status = 1
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        message = reader.read().decode(errors="replace")
    _, status = os.waitpid(pid, 0)
    if status != 0:
        raise OSError(message or f"the probe ended with wait status {status}")


def _unshare(flags: int, what: str) -> None:
    if _LIBC.unshare(flags) != 0:
        number = ctypes.get_errno()
        text = os.strerror(number)
        if number == 22 and len(os.listdir("/proc/self/task")) > 1:  # EINVAL
            text += " (user namespaces need a single-threaded process)"
        raise OSError(number, f"{what}: {text}")


def _loopback_up() -> None:
    """``ip link set lo up``, without needing iproute2: a new namespace starts with lo down."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack(_IFREQ, b"lo", 0)
        flags = struct.unpack(_IFREQ, fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | _IFF_UP))


def _describe(err: OSError) -> str:
    """'what: why' without Python's '[Errno N]' prefix."""
    if err.strerror and err.filename:
        return f"{err.filename}: {err.strerror}"
    return err.strerror or str(err)
