"""Which Python files a task's log lines come from: the toolkit's own, or TensorFlow's and its libraries'.

The launcher shows a task's own lines and the toolkit's, and keeps the libraries' INFO lines for the logs
(launch/task_output.py); a line names its source file by basename.
"""

from __future__ import annotations

import functools
import importlib.util
import os

from ps_toolkit.process import task_entries

_LIBRARIES = ("tensorflow", "absl", "tf_keras", "keras")


@functools.cache
def toolkit_files() -> frozenset[str]:
    """Basenames of the toolkit's modules and scripts: their log lines are the toolkit's."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    root = os.path.dirname(package)
    names = set()
    for folder in (package, os.path.join(root, "scripts"), *_registered_source_folders()):
        for _, _, files in os.walk(folder):
            names.update(n for n in files if n.endswith(".py"))
    return frozenset(names)


def _registered_source_folders() -> list[str]:
    """The folders of the packages the tools registered as the toolkit's (task_entries), found without importing."""
    folders = []
    for name in task_entries.source_packages():
        spec = importlib.util.find_spec(name)
        folders += list(spec.submodule_search_locations or []) if spec else []
    return folders


@functools.cache
def library_files() -> frozenset[str]:
    """Basenames of TensorFlow's (and absl's, Keras's) Python files, found without importing them."""
    names = set()
    for package in _LIBRARIES:
        spec = importlib.util.find_spec(package)
        for root in (spec.submodule_search_locations or []) if spec else []:
            for _folder, _dirs, files in os.walk(root):
                names.update(n for n in files if n.endswith(".py"))
    return frozenset(names - toolkit_files())
