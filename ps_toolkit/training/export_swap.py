"""Putting a new SavedModel at ``--export_dir``: staged beside it, swapped in whole, leftovers of dead exports removed.

Design: docs/design.md, "One replica's step".
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator

from ps_toolkit.base.errors import ConfigError

STAGING_PREFIX = ".export-"
_LOCK_FILE = ".lock"
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


@contextlib.contextmanager
def staging_folder(export_dir: str) -> Iterator[str]:
    """A fresh staging folder beside ``export_dir``, locked while the export lives, removed after it."""
    parent = os.path.dirname(os.path.abspath(export_dir))
    os.makedirs(parent, exist_ok=True)
    parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(parent_fd, fcntl.LOCK_EX)
        remove_dead_staging(parent)
        staging = tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=parent)
        lock_fd = os.open(os.path.join(staging, _LOCK_FILE), os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
    finally:
        os.close(parent_fd)  # releases the parent's lock
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        os.close(lock_fd)


def remove_dead_staging(parent: str) -> list[str]:
    """Removes the staging folders in ``parent`` that no live export holds; returns them."""
    removed = []
    for name in sorted(os.listdir(parent)):
        path = os.path.join(parent, name)
        if not name.startswith(STAGING_PREFIX) or os.path.islink(path) or not os.path.isdir(path):
            continue
        if not _held(os.path.join(path, _LOCK_FILE)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _held(lock_path: str) -> bool:
    try:
        fd = os.open(lock_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False  # no lock file: killed before it took one (the parent's lock was held then)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def swap_in(new: str, export_dir: str) -> None:
    """Puts the model folder ``new`` at ``export_dir``; a model there is replaced, never left half written.

    Afterwards ``new`` holds the old model (or nothing), removed with its staging folder.
    """
    if not os.path.lexists(export_dir):
        os.rename(new, export_dir)
        return
    if not os.path.isfile(os.path.join(export_dir, "saved_model.pb")) and os.listdir(export_dir):
        raise ConfigError(f"--export_dir={export_dir} holds files that are not a SavedModel; not replacing them")
    if exchange(new, export_dir):
        return
    aside = os.path.join(os.path.dirname(new), "old")
    os.rename(export_dir, aside)
    os.rename(new, export_dir)


def exchange(first: str, second: str) -> bool:
    """Swaps two paths in one step (renameat2 RENAME_EXCHANGE); False where this system cannot."""
    renameat2 = getattr(_LIBC, "renameat2", None)
    if renameat2 is None:
        return False
    done = renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE)
    if done == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), second)
