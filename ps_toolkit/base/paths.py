"""Private per-user state: run folders, default checkpoints and port locks under one 0700 folder.

Design: docs/design.md, "Private per-user state".
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import stat
import tempfile
import time

from ps_toolkit.base.errors import ConfigError

# The folder holding the ps_toolkit package: a checkout, or site-packages.
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KEEP_RUNS = 20
_IN_USE_FILE = ".in_use"
_RUN_NAME = re.compile(r"^(run|cluster)-\d{8}-\d{6}-[0-9a-z_]+$")
# Locks of the run folders this process made, held until release_run_dir() or exit.
_held: dict[str, int] = {}


def state_dir() -> str:
    """``$TMPDIR/ps_toolkit-<uid>``, created 0700 and checked (see the module docstring)."""
    return private_dir(os.path.join(tempfile.gettempdir(), f"ps_toolkit-{os.getuid()}"))


def state_subdir(name: str) -> str:
    return private_dir(os.path.join(state_dir(), name))


def private_dir(path: str) -> str:
    """Creates ``path`` mode 0700, or checks the existing one is this user's own; returns it."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as err:
        raise ConfigError(f"cannot create the private folder {path}: {err.strerror}") from None
    check_private_dir(path)
    return path


def check_private_dir(path: str) -> None:
    """Raises ConfigError unless ``path`` is a real folder owned by this user, closed to others."""
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        raise ConfigError(f"refusing {path}: it is a symbolic link (to {os.readlink(path)}), not a folder of yours")
    if not stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"refusing {path}: it is not a folder")
    if info.st_uid != os.getuid():
        raise ConfigError(
            f"refusing {path}: it is owned by uid {info.st_uid}, not by you (uid {os.getuid()}); "
            "another user may have planted it: remove it or set TMPDIR"
        )
    if info.st_mode & 0o077:
        raise ConfigError(
            f"refusing {path}: its mode is {stat.S_IMODE(info.st_mode):o}, open to other users; it must be 700"
        )


def write_file_nofollow(path: str, text: str) -> None:
    """Writes ``text`` to ``path`` through a new file in the same folder, renamed over it.

    A symbolic link at ``path`` is refused (ConfigError), and the rename
    replaces the name itself, so a link planted after the check is not
    followed either.
    """
    folder = os.path.dirname(os.path.abspath(path))
    try:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            raise ConfigError(
                f"refusing to write {path}: it is a symbolic link (to {os.readlink(path)}); "
                "someone else may have planted it"
            )
    except FileNotFoundError:
        pass
    handle, temp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        raise


def new_run_dir(kind: str = "run", parent: str | None = None, keep: int = KEEP_RUNS) -> str:
    """A fresh run folder ``<parent>/<kind>-<date>-<time>-<suffix>``, marked in use by this process.

    ``parent`` defaults to ``state_dir()/runs``. Older run folders there are
    pruned first (``prune_runs``).
    """
    parent = parent or state_subdir("runs")
    prune_runs(parent, keep=max(keep - 1, 0))
    path = tempfile.mkdtemp(prefix=f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}-", dir=parent)
    os.chmod(path, 0o700)
    fd = os.open(os.path.join(path, _IN_USE_FILE), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    _held[path] = fd
    return path


def release_run_dir(path: str) -> None:
    """Marks a folder from ``new_run_dir`` as no longer in use (pruning may then remove it)."""
    fd = _held.pop(path, None)
    if fd is not None:
        os.close(fd)


def prune_runs(parent: str, keep: int = KEEP_RUNS) -> list[str]:
    """Removes all but the newest ``keep`` run folders in ``parent``; skips folders in use. Returns the removed."""
    try:
        names = [n for n in os.listdir(parent) if _RUN_NAME.match(n)]
    except FileNotFoundError:
        return []
    folders = []
    for name in names:
        path = os.path.join(parent, name)
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(info.st_mode):
            folders.append((info.st_mtime, path))
    folders.sort(reverse=True)
    removed = []
    for _, path in folders[keep:]:
        if _in_use(path):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _in_use(path: str) -> bool:
    try:
        fd = os.open(os.path.join(path, _IN_USE_FILE), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


# sockaddr_un's sun_path holds 108 bytes, the terminating NUL included.
_SOCKET_PATH_MAX = 107


@contextlib.contextmanager
def socket_address(path: str):
    """``path`` as a Unix socket address for bind or connect: itself, or, when it is longer than a
    socket address can hold (a deep $TMPDIR), the same file reached through a descriptor of its folder."""
    if len(os.fsencode(path)) <= _SOCKET_PATH_MAX:
        yield path
        return
    folder = os.open(os.path.dirname(path) or ".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{folder}/{os.path.basename(path)}"
    finally:
        os.close(folder)
