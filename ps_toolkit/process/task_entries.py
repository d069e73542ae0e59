"""The task commands the process layer treats specially, given to it as data by the layer that owns them.

The process layer never names the modules above it: the toolkit's own task
entries (which commands a fork server may run, which answer a stack-dump
signal, which is the default task command) and the modules a fork server
imports before its first fork are registered here by the package that owns
them (``ps_toolkit/__init__.py`` registers the tools' own; a user may add more).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import threading
from collections.abc import Mapping, Sequence


@dataclasses.dataclass(frozen=True)
class TaskEntry:
    """A Python task entry, run as ``python SCRIPT ARGS`` or ``python -m MODULE ARGS``.

    Attributes:
      script: the entry's script file (``python SCRIPT``); compared by real path.
      module: the same entry as a module (``python -m MODULE``).
      forkable: a fork server may run it instead of exec (it imports nothing the server has not).
      legacy_keras_only: forked only while the task's environment keeps the legacy Keras the server imports.
      dumps_stacks: it writes its threads' stacks on ``stack_dump.DUMP_SIGNAL`` instead of dying.
      default: the command a launch runs when it is given none.
    """

    script: str
    module: str
    forkable: bool = True
    legacy_keras_only: bool = False
    dumps_stacks: bool = False
    default: bool = False


_ENTRIES: list[TaskEntry] = []
_PRELOAD: list[str] = []
_SOURCE_PACKAGES: list[str] = []
_LOCK = threading.Lock()


def register_task_entry(entry: TaskEntry) -> None:
    """Adds ``entry`` to the known task entries (once; registering it again changes nothing)."""
    with _LOCK:
        if entry not in _ENTRIES:
            _ENTRIES.append(entry)


def register_preload(modules: Sequence[str]) -> None:
    """Adds ``modules`` to what every fork server imports before its first fork, in order."""
    with _LOCK:
        _PRELOAD.extend(name for name in modules if name not in _PRELOAD)


def register_source_package(name: str) -> None:
    """Adds a package whose modules' log lines are the toolkit's own (a task entry's, such as compat's)."""
    with _LOCK:
        if name not in _SOURCE_PACKAGES:
            _SOURCE_PACKAGES.append(name)


def source_packages() -> tuple[str, ...]:
    """The packages registered with ``register_source_package``, in order."""
    with _LOCK:
        return tuple(_SOURCE_PACKAGES)


def preload() -> tuple[str, ...]:
    """What a fork server imports before its first fork (besides what its starter adds)."""
    with _LOCK:
        return tuple(_PRELOAD)


def default_entry() -> TaskEntry:
    """The entry a launch runs when it is given no command.

    Raises:
      LookupError: none is registered (``ps_toolkit`` registers its own when it is imported).
    """
    with _LOCK:
        defaults = [entry for entry in _ENTRIES if entry.default]
    if not defaults:
        raise LookupError("no default task entry is registered (process.task_entries.register_task_entry)")
    return defaults[-1]


def entry_of(argv: Sequence[str]) -> TaskEntry | None:
    """The registered entry ``argv`` (``python SCRIPT ...`` or ``python -m MODULE ...``) runs, or None."""
    if len(argv) < 2:
        return None
    with _LOCK:
        entries = list(_ENTRIES)
    if argv[1] == "-m":
        module = argv[2] if len(argv) > 2 else ""
        return next((entry for entry in entries if entry.module == module), None)
    script = os.path.realpath(argv[1])
    return next((entry for entry in entries if os.path.realpath(entry.script) == script), None)


def forkable(argv: Sequence[str], env: Mapping[str, str], legacy_keras_env: str) -> bool:
    """Whether a fork server may run ``argv``: this interpreter running a registered forkable entry.

    Args:
      argv: the task's command.
      env: the task's environment (its PATH finds a bare ``python``).
      legacy_keras_env: the variable that, set to anything but "1", turns the legacy Keras off.
    """
    if len(argv) < 2 or os.path.realpath(_command_file(argv[0], env)) != os.path.realpath(sys.executable):
        return False
    entry = entry_of(argv)
    if entry is None or not entry.forkable:
        return False
    return not (entry.legacy_keras_only and env.get(legacy_keras_env, "1") != "1")


def _command_file(name: str, env: Mapping[str, str]) -> str:
    """The file a command runs: ``name`` itself when it is a path, else the first match on the task's PATH
    (``python scripts/run_legacy.py`` as the README writes it is this interpreter when PATH says so)."""
    if os.sep in name:
        return name
    return shutil.which(name, path=env.get("PATH", os.defpath)) or name
