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
    sys.path = python_path.task_sys_path(sys.path, server_entries, task, safe_path=SAFE_PATH)
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from types import ModuleType

# A file that makes a top-level module of its folder: name.py, name.cpython-311-x86_64-linux-gnu.so, ...
_MODULE_SUFFIXES = (".py", ".pyc", ".so", ".pyd")
# Modules python imports at start-up from the first folder that holds them (site.py): a task's
# folder that holds one would run it under exec, and the server, already started, cannot.
_STARTUP_MODULES = ("sitecustomize", "usercustomize")
# python -P or PYTHONSAFEPATH (3.11+): no script folder first on sys.path. A forked task has its server's flag,
# which is the task's own: PYTHONSAFEPATH is an import-time variable (fork_protocol.import_key).
SAFE_PATH = bool(getattr(sys.flags, "safe_path", False))


def entries(value: str, cwd: str) -> list[str]:
    """The folders ``python`` started in ``cwd`` puts on ``sys.path`` for ``PYTHONPATH=value``, in order
    (absolute, each once: site.py drops repeats)."""
    if not value:
        return []
    return _unique(os.path.abspath(os.path.join(cwd, entry)) for entry in value.split(os.pathsep))


def refusal(
    server_entries: Sequence[str], task_entries: Sequence[str], imported: Mapping[str, ModuleType]
) -> str | None:
    """Why a server whose PYTHONPATH put ``server_entries`` on its path cannot run a task whose PYTHONPATH
    gives ``task_entries`` as exec would, or None. ``imported`` holds the server's module names (``sys.modules``)."""
    missing = [entry for entry in server_entries if entry not in task_entries]
    if missing:
        return f"the task's PYTHONPATH lacks {os.pathsep.join(missing)}, which the fork server imported under"
    for folder in (entry for entry in task_entries if entry not in server_entries):
        modules = _modules_in(folder)
        for name, module in modules:
            if module in _STARTUP_MODULES:
                why = "which python runs at start-up and the fork server did not"
                return f"PYTHONPATH folder {folder} holds {name}, {why}"
        for name, module in modules:
            if _imported_elsewhere(module, folder, imported):
                return f"PYTHONPATH folder {folder} holds {name}, a module the fork server has already imported"
    return None


def task_sys_path(
    server_path: Sequence[str], server_entries: Sequence[str], task_entries: Sequence[str], *, safe_path: bool
) -> list[str]:
    """``server_path`` (the server's ``sys.path``) with the server's PYTHONPATH folders replaced by the task's.

    Without ``safe_path`` (``python -P``, PYTHONSAFEPATH) the first entry is the script's folder, which
    the child sets. Folders are found by value: site.py dropped repeats, and the server's
    working folder may be one of its PYTHONPATH folders.
    """
    head = [] if safe_path else [server_path[0]]
    rest = [entry for entry in server_path[len(head) :] if entry not in server_entries]
    return _unique([*head, *task_entries, *rest])


def _unique(paths) -> list[str]:
    seen: set[str] = set()
    return [path for path in paths if not (path in seen or seen.add(path))]


def _modules_in(folder: str) -> list[tuple[str, str]]:
    """(file or folder name, top-level module name) of what ``folder`` holds that could be imported, sorted."""
    try:
        names = os.listdir(folder)
    except OSError:  # not there (yet) or unreadable: python skips it too
        return []
    found = []
    for name in sorted(names):
        module = name.split(".", 1)[0] if name.endswith(_MODULE_SUFFIXES) else name
        if module != name or os.path.isdir(os.path.join(folder, name)):
            found.append((name, module))
    return found


def _imported_elsewhere(module: str, folder: str, imported: Mapping[str, ModuleType]) -> bool:
    """Whether ``module`` is imported from somewhere other than ``folder``.

    One imported from this very folder (the server started in the toolkit's checkout, a task adding
    that checkout) is the module exec would import too.
    """
    if module not in imported:
        return False
    origin = getattr(imported[module], "__file__", None) or ""
    return folder not in (os.path.dirname(origin), os.path.dirname(os.path.dirname(origin)))
