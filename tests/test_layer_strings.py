"""No module names a module of an upper layer in a string (the layers contract cannot see strings)."""

from __future__ import annotations

import ast
import os
import re

import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "ps_toolkit")
# benchmarks/ time the tools as commands, as a user runs them (and leave the package for the repo's top level).
_CLIENTS_OF_THE_TOOLS = ("benchmarks",)
_MODULE_NAME = re.compile(r"\bps_toolkit(?:_compat)?(?:\.[A-Za-z_][A-Za-z0-9_]*)+")


def _layers() -> dict[str, int]:
    """Each subpackage's rank in pyproject.toml's layers contract: 0 is the top."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        contracts = tomllib.load(f)["tool"]["importlinter"]["contracts"]
    layers = next(c["layers"] for c in contracts if c["type"] == "layers")
    return {name.strip(): rank for rank, layer in enumerate(layers) for name in layer.split("|")}


def _strings(tree: ast.Module):
    """The string constants of a module that are not docstrings (documentation may name any module)."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node


def _rank_of(name: str, ranks: dict[str, int]) -> int | None:
    """The layer rank of a dotted module name (the compat package counts as the tools' layer)."""
    if name.startswith("ps_toolkit_compat"):
        return ranks["tools"]
    parts = name.split(".")
    return ranks.get(parts[1]) if len(parts) > 1 else None


def upward_strings(package_dir: str = PACKAGE) -> list[str]:
    """``path:line: NAME`` for every string in a layered subpackage that names a module of a layer above it."""
    ranks = _layers()
    found = []
    for package in sorted(set(ranks) - set(_CLIENTS_OF_THE_TOOLS)):
        folder = os.path.join(package_dir, package)
        paths = [folder + ".py"] if os.path.isfile(folder + ".py") else []
        for parent, _, files in os.walk(folder):
            paths += [os.path.join(parent, f) for f in files if f.endswith(".py")]
        for path in paths:
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), path)
            for node in _strings(tree):
                for name in _MODULE_NAME.findall(node.value):
                    rank = _rank_of(name, ranks)
                    if rank is not None and rank < ranks[package]:
                        found.append(f"{os.path.relpath(path, package_dir)}:{node.lineno}: {name}")
    return found


def test_no_module_names_an_upper_layer_in_a_string():
    assert upward_strings() == []


def test_the_check_sees_a_string_naming_an_upper_layer(tmp_path):
    """The check itself can fail: a process module that names a tool outside its docstring is found."""
    fake = tmp_path / "process"
    fake.mkdir()
    docstring = '"""Doc: ps_toolkit.tools.run_task may be named here."""\n'
    (fake / "bad.py").write_text(docstring + 'ENTRY = "ps_toolkit.tools.run_task"\n')
    assert upward_strings(str(tmp_path)) == ["process/bad.py:2: ps_toolkit.tools.run_task"]
