"""A task's ``PYTHONPATH`` in a forked task: the ``sys.path`` that ``python`` would have given it.

A fork server imported its modules under its own ``PYTHONPATH``. A task may add
folders to it (a user's model module: ``PYTHONPATH=examples/digits_cnn``): the
child puts them where ``python`` would, after ``sys.path[0]``. That is the same
process as exec's unless a folder it adds holds a module the server has
already imported (exec would import the folder's): such a task, or one that
drops a folder of the server's, is refused and started with exec.

Example:
    task = python_path.entries(task_env.get("PYTHONPATH", ""), task_cwd)
    why = python_path.refusal(server_entries, task, sys.modules)
    sys.path = python_path.task_sys_path(sys.path, server_entries, task)
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from types import ModuleType

# A file that makes a top-level module of its folder: name.py, name.cpython-311-x86_64-linux-gnu.so, ...
_MODULE_SUFFIXES = (".py", ".pyc", ".so", ".pyd")


def entries(value: str, cwd: str) -> list[str]:
    """The folders ``python`` started in ``cwd`` puts on ``sys.path`` for ``PYTHONPATH=value``, in order."""
    if not value:
        return []
    return [os.path.abspath(os.path.join(cwd, entry)) for entry in value.split(os.pathsep)]


def refusal(
    server_entries: Sequence[str], task_entries: Sequence[str], imported: Mapping[str, ModuleType]
) -> str | None:
    """Why a server whose PYTHONPATH put ``server_entries`` on its path cannot run a task whose PYTHONPATH
    gives ``task_entries`` as exec would, or None. ``imported`` holds the server's module names (``sys.modules``)."""
    missing = [entry for entry in server_entries if entry not in task_entries]
    if missing:
        return f"the task's PYTHONPATH lacks {os.pathsep.join(missing)}, which the fork server imported under"
    for folder in (entry for entry in task_entries if entry not in server_entries):
        shadowed = _shadowed(folder, imported)
        if shadowed:
            return f"PYTHONPATH folder {folder} holds {shadowed}, a module the fork server has already imported"
    return None


def task_sys_path(server_path: Sequence[str], server_entries: Sequence[str], task_entries: Sequence[str]) -> list:
    """``server_path`` (the server's ``sys.path``) with the server's PYTHONPATH folders replaced by the task's."""
    return [server_path[0], *task_entries, *server_path[1 + len(server_entries) :]]


def _shadowed(folder: str, imported: Mapping[str, ModuleType]) -> str | None:
    """A top-level module or package in ``folder`` that is imported from elsewhere, or None.

    One imported from this very folder (the server started in the toolkit's checkout, a task adding
    that checkout) is the module exec would import too.
    """
    try:
        names = os.listdir(folder)
    except OSError:  # not there (yet) or unreadable: python skips it too
        return None
    for name in sorted(names):
        candidate = os.path.join(folder, name)
        module = name.split(".", 1)[0] if name.endswith(_MODULE_SUFFIXES) else name
        if module not in imported or (module == name and not os.path.isdir(candidate)):
            continue
        origin = getattr(imported[module], "__file__", None) or ""
        if candidate not in (origin, os.path.dirname(origin)):
            return name
    return None
