"""The two registries of private TensorFlow names: every one the toolkit (ps_toolkit.base.tf_internals) and the
compat layer (ps_toolkit_compat.tf_internals) use is declared in its registry, and still exists.

- The registries (each module's ``USES``) are checked against the installed
  TensorFlow and tensorflow-estimator: an upgrade that drops a name fails
  with one line per name saying who used it and why.
- ps_toolkit/ and compat/ are read (AST) for private TensorFlow names used
  anywhere but the two tf_internals.py; each one fails, named by file:line.
- Classes that subclass TensorFlow's may use its private members only where
  the registry declares them (checked on the imported classes).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import pathlib

import pytest

from ps_toolkit.base import tf_internals
from ps_toolkit_compat import tf_internals as compat_internals

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCANNED = ("ps_toolkit", "compat")
INTERNALS = (pathlib.Path("ps_toolkit/base/tf_internals.py"), pathlib.Path("compat/tf_internals.py"))
ALL_USES = tf_internals.USES + compat_internals.USES
# Python's own privates the toolkit uses (not TensorFlow's): os._exit in forked children, and the
# interpreter's shutdown steps a forked child runs itself before os._exit.
PYTHON_PRIVATES = {"os._exit", "threading._shutdown", "atexit._run_exitfuncs"}
# The toolkit's own markers on objects it patched or made (``_ps_toolkit``, ``_ps_toolkit_checked``, ...).
OWN_MARKER = "_ps_toolkit"
PRIVATE_MODULES = ("tensorflow.python", "tensorflow_estimator.python", "tensorflow_estimator._api", "tensorflow._")
ATTRIBUTE_CALLS = ("getattr", "setattr", "hasattr", "delattr")
TF_PACKAGES = ("tensorflow", "tensorflow_estimator", "tf_keras", "keras")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and not name.startswith(OWN_MARKER)


def _is_self(node: ast.expr, receivers: frozenset) -> bool:
    return isinstance(node, ast.Name) and node.id in receivers


def _private_module(name: str) -> bool:
    return name.startswith(PRIVATE_MODULES)


def _finding(node: ast.AST, receivers: frozenset) -> str | None:
    """What private TensorFlow name ``node`` uses, or None; ``receivers``: the enclosing method's self or cls."""
    if isinstance(node, ast.Attribute) and _private(node.attr) and not _is_self(node.value, receivers):
        text = ast.unparse(node)
        return None if text in PYTHON_PRIVATES else f"private attribute {text}"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ATTRIBUTE_CALLS:
        name = node.args[1] if len(node.args) > 1 else None
        if isinstance(name, ast.Constant) and isinstance(name.value, str) and _private(name.value):
            return None if _is_self(node.args[0], receivers) else f"{node.func.id} of {name.value!r}"
    if isinstance(node, ast.Import):
        private = [alias.name for alias in node.names if _private_module(alias.name)]
        return f"import of {', '.join(private)}" if private else None
    if isinstance(node, ast.ImportFrom) and node.module:
        if _private_module(node.module):
            return f"import from {node.module}"
        private = [alias.name for alias in node.names if node.module.startswith("tensorflow") and _private(alias.name)]
        return f"import of {', '.join(private)} from {node.module}" if private else None
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith(PRIVATE_MODULES):
        return f"private module name {node.value!r}"
    return None


def _walk(node: ast.AST, receivers: frozenset = frozenset(), in_class: bool = False):
    """(node, receivers) for every node below ``node``: receivers name the enclosing method's self or cls.

    A method is a function, or a lambda (``x = property(lambda self: ...)``), in a class body.
    """
    for child in ast.iter_child_nodes(node):
        inner, child_in_class = receivers, in_class or isinstance(node, ast.ClassDef)
        if child_in_class and isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            parameters = child.args.posonlyargs + child.args.args
            inner, child_in_class = frozenset(parameter.arg for parameter in parameters[:1]), False
        yield child, inner
        yield from _walk(child, inner, child_in_class and not isinstance(child, ast.ClassDef))


def private_tf_names(source: str, path: str) -> list[str]:
    """'path:line: what' for each private TensorFlow name in ``source``."""
    found = []
    for node, receivers in _walk(ast.parse(source, path)):
        what = _finding(node, receivers)
        if what:
            found.append(f"{path}:{node.lineno}: {what}")
    return found


def _scanned_files() -> list[pathlib.Path]:
    files = []
    for folder in SCANNED:
        files += [path.relative_to(ROOT) for path in sorted((ROOT / folder).rglob("*.py"))]
    return [path for path in files if path not in INTERNALS]


def test_every_declared_internal_exists_in_the_installed_tensorflow():
    from ps_toolkit_compat import estimator_support

    estimator_support.load()  # the estimator's internals import only once TensorFlow's dropped ones are supplied
    missing = tf_internals.missing() + compat_internals.missing()
    assert not missing, "\n".join(missing)


def test_a_missing_internal_is_named_with_its_user_and_reason():
    gone = tf_internals.Use("tensorflow.python.client.session.BaseSession", "_no_such_flag", "x.py", "why it is used")
    lines = tf_internals.missing([gone])
    version = importlib.metadata.version("tensorflow")
    assert lines == [
        f"TensorFlow {version} no longer has tensorflow.python.client.session.BaseSession._no_such_flag "
        "used by x.py: why it is used"
    ]
    assert tf_internals.missing([tf_internals.Use("tensorflow.python.no_such_module", "x", "x.py", "why")])


def test_each_registry_declares_only_its_own_layers_names():
    assert all(not use.used_by.startswith("compat/") for use in tf_internals.USES)
    assert all(use.used_by.startswith("compat/") for use in compat_internals.USES)


def test_registry_entries_are_unique_and_documented():
    seen = set()
    for use in ALL_USES:
        assert (use.owner, use.name, use.used_by) not in seen, use
        seen.add((use.owner, use.name, use.used_by))
        assert use.why and os.path.exists(ROOT / use.used_by), use


def test_no_private_tensorflow_name_outside_tf_internals():
    found = []
    for path in _scanned_files():
        found += private_tf_names((ROOT / path).read_text(encoding="utf-8"), str(path))
    assert not found, "private TensorFlow names outside the two tf_internals.py:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "line",
    [
        "from tensorflow.python.training import saver",
        "import tensorflow.python.eager.context",
        "from tensorflow_estimator.python.estimator import training",
        "x = session._closed",
        "class E(training._TrainingExecutor): pass",
        "y = super()._start_std_server(config)",
        "z = getattr(hook, '_sync_optimizer')",
        "m = sys.modules.get('tensorflow.python.eager.context')",
        "from tensorflow import _pywrap_x",
        "def wrap():\n    cls = RunConfig\n    return cls._init_distributed_setting_from_environment_var",
        "class A:\n    def f(self, other):\n        return other._closed",
    ],
)
def test_the_scan_names_each_kind_of_private_use(line):
    found = private_tf_names(line, "m.py")
    assert len(found) == 1 and found[0].startswith(f"m.py:{line.count(chr(10)) + 1}: ")


@pytest.mark.parametrize(
    "line",
    [
        "os._exit(1)",
        "hook._ps_toolkit = True",
        "getattr(f, '_ps_toolkit_checked', False)",
        "class A:\n    def f(self):\n        self._x = getattr(self, '_pidfd', None)",
        "class A:\n    @classmethod\n    def g(cls):\n        return cls._y",
        "class A:\n    x = property(lambda self: self._x)",
        "import tensorflow as tf",
        "from tensorflow_estimator_helpers import x",
    ],
)
def test_the_scan_leaves_python_privates_and_own_markers(line):
    assert private_tf_names(line, "m.py") == []


def _subclass_uses(cls: type) -> list[tuple[int, str]]:
    """(line, name) for each private member ``cls``'s own body reads, sets or overrides."""
    lines, first = inspect.getsourcelines(cls)
    tree = ast.parse(inspect.cleandoc("".join(lines)) if lines[0].startswith(" ") else "".join(lines))
    uses = []
    for node, receivers in _walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and _is_self(node.value, receivers):
            uses.append((first + node.lineno - 1, node.attr))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _private(node.name):
            uses.append((first + node.lineno - 1, node.name))
    return uses


def _tf_private_members(cls: type) -> set[str]:
    names = set()
    for base in cls.__mro__:
        if base.__module__.split(".")[0] in TF_PACKAGES:
            names |= {name for name in tf_internals.referenced_names(base) | set(vars(base)) if _private(name)}
    return names


def _own_classes():
    """(relative path, class) for each class ps_toolkit/ and compat/ define whose bases include TensorFlow's."""
    for path in _scanned_files():
        if not any(isinstance(node, ast.ClassDef) for node in ast.walk(ast.parse((ROOT / path).read_text()))):
            continue
        module = importlib.import_module(".".join(path.with_suffix("").parts))
        for value in list(vars(module).values()):
            if isinstance(value, type) and value.__module__ == module.__name__ and _tf_private_members(value):
                yield str(path), value


def test_subclasses_use_only_declared_private_members_of_tensorflow_classes():
    declared = {(use.used_by, use.name) for use in ALL_USES}
    found = []
    for path, cls in _own_classes():
        tf_names = _tf_private_members(cls)
        for line, name in _subclass_uses(cls):
            if name in tf_names and (path, name) not in declared:
                found.append(f"{path}:{line}: {cls.__name__} uses {name} of its TensorFlow base")
    assert not found, "private members of TensorFlow classes not declared in tf_internals.USES:\n" + "\n".join(found)


AUTOGRAPH_PROBE = """
import json, os, sys, tempfile
import tensorflow as tf
from ps_toolkit.base import tf_internals
from ps_toolkit_compat import tf_internals as compat_internals

def absolute(x):
    if x > 0:
        return x
    return -x

tf.autograph.to_graph(absolute)
def files():
    return sorted(os.path.join(top, n) for top, _, names in os.walk(tempfile.gettempdir()) for n in names)
written = files()
removed = sorted(tf_internals.remove_autograph_files())
print(json.dumps({"written": written, "removed": removed, "left": os.listdir(tempfile.gettempdir())}))
sys.stdout.flush()
os._exit(0)  # as run_task.py ends: no atexit
"""


def test_a_fast_exit_leaves_none_of_autographs_generated_files(tmp_path):
    import json
    import subprocess
    import sys

    temp = tmp_path / "tmp"
    temp.mkdir()
    probe = tmp_path / "autograph_probe.py"  # AutoGraph converts only functions whose source it can read
    probe.write_text(AUTOGRAPH_PROBE)
    env = dict(os.environ, TMPDIR=str(temp), PYTHONPATH=str(ROOT))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as on a user's machine: Python writes $TMPDIR/__pycache__ too
    done = subprocess.run([sys.executable, str(probe)], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["written"] and all("__autograph_generated_file" in path for path in report["written"]), report
    assert any("__pycache__" in path for path in report["written"]), report
    assert report["removed"] == report["written"] and report["left"] == [], report
