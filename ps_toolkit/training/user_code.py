"""Finding a user's ``MODULE:FUNCTION`` (``--model_fn``, ``--input_fn``, ...) and checking what it builds.

``locate`` answers without importing the module (the launcher checks every
reference before it starts a task); ``load`` imports it as Python would from
the current directory and ``PYTHONPATH``.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable

from ps_toolkit.base import user_calls
from ps_toolkit.base.errors import ConfigError


def parse_reference(text: str, flag: str) -> tuple[str, str]:
    """(module, function) from ``MODULE:FUNCTION``; ConfigError naming ``flag`` otherwise."""
    module, sep, function = (text or "").partition(":")
    if not sep or not module or not function.isidentifier() or not all(p.isidentifier() for p in module.split(".")):
        raise ConfigError(f"--{flag}={text!r} is not MODULE:FUNCTION (e.g. my_model:model_fn)")
    return module, function


def _importable_from_cwd() -> None:
    """The current directory first, as ``python -c`` and ``python -m`` put it."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)


def locate(text: str, flag: str) -> None:
    """Checks that ``MODULE:FUNCTION`` names a module on the path that defines FUNCTION, without importing it.

    A module that builds FUNCTION some other way than a top-level ``def``,
    assignment or import passes unchecked when its source cannot tell.
    """
    module, function = parse_reference(text, flag)
    _importable_from_cwd()
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError) as err:
        raise ConfigError(f"--{flag}={text}: cannot find module {module!r}: {err}") from None
    if spec is None:
        raise ConfigError(f"--{flag}={text}: no module named {module!r} in the current directory or PYTHONPATH")
    if not spec.origin or not spec.origin.endswith(".py"):
        return
    try:
        with open(spec.origin, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), filename=spec.origin)
    except (OSError, SyntaxError, UnicodeDecodeError) as err:
        raise ConfigError(f"--{flag}={text}: cannot read {spec.origin}: {err}") from None
    if function not in _top_level_names(tree) and "__getattr__" not in _top_level_names(tree):
        raise ConfigError(f"--{flag}={text}: module {module!r} ({spec.origin}) defines no {function!r}")


def _top_level_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names


def load(text: str, flag: str) -> Callable:
    """The callable ``MODULE:FUNCTION`` names, imported; ConfigError naming the flag if it is not there."""
    module_name, function = parse_reference(text, flag)
    _importable_from_cwd()
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name and module_name.startswith(err.name):
            raise ConfigError(
                f"--{flag}={text}: no module named {module_name!r} in the current directory or PYTHONPATH"
            ) from None
        raise user_calls.failure(f"--{flag}={text}", f"importing {module_name!r} raised", err) from None
    except Exception as err:  # noqa: BLE001 - the user's module failed as it was imported: theirs, in one line
        raise user_calls.failure(f"--{flag}={text}", f"importing {module_name!r} raised", err) from None
    except KeyboardInterrupt:
        user_calls.interrupted(f"--{flag}={text}")
    target = getattr(module, function, None)
    if target is None:
        raise ConfigError(f"--{flag}={text}: module {module_name!r} ({module.__file__}) defines no {function!r}")
    if not callable(target):
        raise ConfigError(f"--{flag}={text}: {function!r} is a {type(target).__name__}, not a function")
    return target


def parse_params(text: str | None) -> dict:
    """``--params``: a JSON object, handed to model_fn as ``params``."""
    if not text:
        return {}
    try:
        params = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"--params={text!r} is not JSON: {err.msg} at character {err.pos}") from None
    if not isinstance(params, dict):
        raise ConfigError(f"--params={text!r} must be a JSON object ({{...}}), not a {type(params).__name__}")
    return params
