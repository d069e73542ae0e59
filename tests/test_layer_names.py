"""No module names a module of a higher layer in a string: the dependencies import-linter cannot see.

import-linter (pyproject.toml, run by .ci/run) checks imports; a lower layer
that names an upper one in a string (``importlib.import_module("ps_toolkit.tools.x")``,
a ``-m`` command, a preload list) depends on it all the same. This test reads
every module of ps_toolkit (AST) and fails on each string literal, docstrings
aside, that names a module of a higher layer or of the compat layer, which sits
above them all.
"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10: pytest's own TOML reader
    import tomli as tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
COMPAT = "ps_toolkit_compat"
# A dotted module name (ps_toolkit.launch.x, ps_toolkit_compat.y) or a source path (ps_toolkit/launch/x.py).
NAMED = re.compile(r"\bps_toolkit(?:(?P<compat>_compat)\b|[./](?P<package>[a-z_]+)\b)")
# The two exceptions, each for a reason:
# - base/tf_internals.py records, for each private TensorFlow name, the source file that needs it (a path,
#   ps_toolkit/task/x.py): a record for the reader and for tests/test_tf_internals.py, which checks the file
#   exists; nothing loads or runs it. Dotted module names stay forbidden there too.
# - tools/entries.py, in the commands' own layer, names the compat layer's command (run_legacy) and what a
#   fork server preloads for it: the commands a launch may run, as a shell names them; nothing in ps_toolkit
#   imports compat, and no layer below the commands names it.
SOURCE_PATHS_ALLOWED = {"ps_toolkit/base/tf_internals.py"}
COMPAT_COMMANDS_NAMED_IN = {"ps_toolkit/tools/entries.py"}


def layer_ranks() -> dict[str, int]:
    """{subpackage or top-level module of ps_toolkit: its layer's rank}, 0 the lowest, from pyproject.toml."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    (layers,) = [contract["layers"] for contract in contracts if contract["type"] == "layers"]
    ranks = {}
    for rank, layer in enumerate(reversed(layers)):
        for name in re.split(r"[|:]", layer):
            ranks[name.strip()] = rank
    return ranks


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes of the module, its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def upward_names(source: str, path: str, rank: int, ranks: dict[str, int], paths_allowed: bool = False) -> list[str]:
    """'path:line: name' for each string in ``source`` that names a layer above ``rank`` or the compat layer;
    with ``paths_allowed``, source paths (ps_toolkit/task/x.py) of upper layers are not counted."""
    tree = ast.parse(source, path)
    skipped = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in skipped:
            continue
        for match in NAMED.finditer(node.value):
            package = match.group("package")
            if paths_allowed and match.group(0)[len("ps_toolkit")] == "/":
                continue
            if match.group("compat") or ranks.get(package, -1) > rank:
                found.append(f"{path}:{node.lineno}: {match.group(0)!r} in {node.value!r}")
    return found


def _layer_of(path: pathlib.Path, ranks: dict[str, int]) -> int | None:
    """The rank of the layer ``path`` (relative to ps_toolkit/) belongs to; None for modules of no layer."""
    return ranks.get(path.parts[0].removesuffix(".py"))


def test_no_module_names_a_higher_layer_in_a_string():
    ranks = layer_ranks()
    found = []
    for path in sorted((ROOT / "ps_toolkit").rglob("*.py")):
        relative = path.relative_to(ROOT / "ps_toolkit")
        rank = _layer_of(relative, ranks)
        name = str(path.relative_to(ROOT))
        if rank is None:
            continue
        names = upward_names(path.read_text(encoding="utf-8"), name, rank, ranks, name in SOURCE_PATHS_ALLOWED)
        if name in COMPAT_COMMANDS_NAMED_IN:
            names = [found_name for found_name in names if COMPAT not in found_name]
        found += names
    assert not found, "string-named dependencies on a higher layer:\n" + "\n".join(found)


RANKS = {"tools": 3, "launch": 2, "task": 1, "base": 0}


@pytest.mark.parametrize(
    "line",
    [
        'ENTRY = "ps_toolkit.tools.run_task"',
        'PRELOAD = ("os", "ps_toolkit.launch.supervisor")',
        'RUNNER = "ps_toolkit_compat.run_legacy"',
        'FILE = "ps_toolkit/tools/run_task.py"',
        'command = f"python -m ps_toolkit.launch.x --n={n}"',
        'def f():\n    """Docstring."""\n    return importlib.import_module("ps_toolkit_compat")',
    ],
)
def test_the_scan_finds_each_kind_of_upward_name(line):
    found = upward_names(line, "m.py", RANKS["task"], RANKS)
    assert len(found) == 1 and found[0].startswith(f"m.py:{line.count(chr(10)) + 1}: ")


@pytest.mark.parametrize(
    "line",
    [
        'NAME = "ps_toolkit.base.errors"',
        'NAME = "ps_toolkit.task.server"',
        '"""A module docstring may mention ps_toolkit.tools.run_task."""',
        'def f():\n    """See ps_toolkit_compat.run_legacy."""',
        'NAME = "my_ps_toolkit.tools"',
        "x = 1  # ps_toolkit.tools in a comment",
    ],
)
def test_the_scan_leaves_names_of_the_same_or_lower_layers(line):
    assert upward_names(line, "m.py", RANKS["task"], RANKS) == []


def test_a_registry_of_source_paths_may_name_upper_files_but_not_modules():
    line = 'USED_BY = "ps_toolkit/tools/run_task.py"\nENTRY = "ps_toolkit.tools.run_task"'
    found = upward_names(line, "m.py", RANKS["base"], RANKS, paths_allowed=True)
    assert len(found) == 1 and found[0].startswith("m.py:2: ")
