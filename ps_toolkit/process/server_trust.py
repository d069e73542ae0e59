"""Whether a fork server's socket, and the process behind it, may be trusted with this user's tasks.

A client hands the server at ``PS_TOOLKIT_FORK_SERVER`` everything a task has: its
environment (secrets included), its log files, its network namespace. So, as the
server checks its clients, the client checks the server before it sends anything:

- the socket lies in a folder only this user (or root) can write, every folder above
  it closed to others too (or sticky, as /tmp is; group-writable only for a group of
  this user alone): nobody else could have put it there
  (``path_refusal``);
- the process listening is this user's own (``SO_PEERCRED``, ``peer_refusal``);
- a server that does not answer at once (it says "importing" while it imports) is stalled
  (fork_client, host_socket).

Each check returns why not, as the end of one line, or None.
"""

from __future__ import annotations

import grp
import os
import pwd
import socket
import stat
import struct

_PEERCRED = struct.Struct("3i")


def path_refusal(path: str) -> str | None:
    """Why the socket at ``path`` may have been put there by another user, or None."""
    why = folder_refusal(os.path.dirname(os.path.abspath(path)))
    if why:
        return why
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None  # nothing listens: the caller says so
    if info.st_uid not in (os.getuid(), 0):
        return f"{path} is owned by uid {info.st_uid}, not by you (uid {os.getuid()})"
    return None


def folder_refusal(folder: str) -> str | None:
    """Why another user could write ``folder`` or replace it (through a folder above it), or None; checked
    as written and with its symbolic links resolved."""
    return _chain_refusal(folder) or _chain_refusal(os.path.realpath(folder))


def _chain_refusal(folder: str) -> str | None:
    trusted = (os.getuid(), 0)
    current = folder
    while True:
        try:
            info = os.lstat(current)
        except OSError as err:
            return f"cannot check {current}: {err.strerror}"
        if info.st_uid not in trusted:
            return f"{current} is owned by uid {info.st_uid}, another user; use a folder of yours"
        group_writes = info.st_mode & stat.S_IWGRP and not _private_group(info.st_gid)
        writable_by_others = info.st_mode & stat.S_IWOTH or group_writes
        # A sticky folder (/tmp) lets others add entries, not replace this user's: fine above, not as the folder.
        if writable_by_others and (current == folder or not info.st_mode & stat.S_ISVTX):
            return (
                f"{current} is a folder other users can write (mode {stat.S_IMODE(info.st_mode):o}), so anyone may "
                "have put a socket there; use a folder only you can write, such as the per-user state folder"
            )
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


def _private_group(gid: int) -> bool:
    """Whether no user but this one (and root) is in group ``gid`` (a user-private group, umask 002 setups)."""
    try:
        members = set(grp.getgrgid(gid).gr_mem)
        members.update(user.pw_name for user in pwd.getpwall() if user.pw_gid == gid)
        mine = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return False
    return members <= {mine, "root"}


def peer_uid_pid(sock: socket.socket) -> tuple[int, int]:
    """The user and process id of the process at the other end of a connected Unix socket."""
    pid, uid, _ = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
    return uid, pid


def peer_refusal(sock: socket.socket, path: str) -> str | None:
    """Why the process listening at ``path`` (connected as ``sock``) is not this user's own, or None."""
    uid, pid = peer_uid_pid(sock)
    if uid != os.getuid():
        return f"{path} is served by uid {uid} (pid {pid}), not by you (uid {os.getuid()})"
    return None
