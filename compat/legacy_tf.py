"""Builds the legacy ``tensorflow`` module (tf.compat.v1, TF 1.x names restored) and installs it in sys.modules.

    from ps_toolkit_compat import legacy_tf
    legacy_tf.install()          # before the old script's ``import tensorflow as tf``

After ``install()``, ``import tensorflow as tf`` gives ``tf.compat.v1`` with
v2 behaviour disabled, plus ``tf.contrib.training`` (the toolkit's placement
strategies), ``tensorflow.examples.tutorials.mnist.input_data``, session
classes that start and end cleanly (``compat.supervision``), and the real
``tf.estimator`` (``compat.estimator_support``; its cluster roles start and
end like the sessions, ``compat.estimator_roles``), and
``import tensorflow_recommenders_addons`` (TFRA's graph-mode API over the
toolkit's dynamic tables, ``compat.tfra``). Any other name
TF 2.21 lacks raises one line naming its replacement (``compat.removed``).
Set ``TF_USE_LEGACY_KERAS=1`` before TensorFlow is first imported, or
``tf.layers`` is missing (scripts/run_legacy.py does).
"""

from __future__ import annotations

import importlib.abc
import sys
import types

import tensorflow as _real_tf

from ps_toolkit.training.queue_runners import quiet_cancelled_queue_runners
from ps_toolkit_compat import (
    contrib,
    estimator_support,
    internal_modules,
    mnist_input_data,
    mnist_tutorial,
    supervision,
    task_context,
    task_start,
    tf_internals,
)
from ps_toolkit_compat.removed import RemovedModuleError, RemovedSymbolError
from ps_toolkit_compat.tfra import install as tfra_install

_v1 = _real_tf.compat.v1
# Packages that only exist in the legacy surface: importing a module below them that
# is not provided is a removed module, not a missing file.
_FAKE_PACKAGES = ("tensorflow.contrib", "tensorflow.examples", "tensorflow.estimator")


class LegacyModule(types.ModuleType):
    """A namespace: its own members, then ``base``'s, then a one-line RemovedSymbolError."""

    def __init__(self, name: str, prefix: str, base, members: dict, fallback=None):
        super().__init__(name)
        self.__dict__.update(members)
        self._base, self._prefix, self._fallback = base, prefix, fallback

    def __getattr__(self, name: str):
        if self._base is not None and hasattr(self._base, name):
            return getattr(self._base, name)
        if name.startswith("__"):
            # Dunders (``__internal__``, ``__version__``) that libraries look up on ``tensorflow``.
            if self._fallback is not None and hasattr(self._fallback, name):
                return getattr(self._fallback, name)
            raise AttributeError(name)
        raise RemovedSymbolError(f"{self._prefix}{name}")

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(dir(self._base) if self._base is not None else ()))


def real_tensorflow() -> types.ModuleType:
    """TensorFlow 2's own ``tensorflow`` module, which the legacy one stands in for once installed."""
    return _real_tf


def _examples() -> dict[str, types.ModuleType]:
    mnist = LegacyModule(
        "tensorflow.examples.tutorials.mnist",
        "examples.tutorials.mnist.",
        None,
        {"input_data": mnist_input_data, "mnist": mnist_tutorial},
    )
    tutorials = LegacyModule("tensorflow.examples.tutorials", "examples.tutorials.", None, {"mnist": mnist})
    examples = LegacyModule("tensorflow.examples", "examples.", None, {"tutorials": tutorials})
    for module in (mnist, tutorials, examples):
        module.__path__ = []  # packages, so submodule imports reach _RemovedModuleFinder
    return {
        "tensorflow.examples": examples,
        "tensorflow.examples.tutorials": tutorials,
        "tensorflow.examples.tutorials.mnist": mnist,
        "tensorflow.examples.tutorials.mnist.input_data": mnist_input_data,
        "tensorflow.examples.tutorials.mnist.mnist": mnist_tutorial,
    }


def _estimator_modules(api) -> dict[str, types.ModuleType]:
    """``tensorflow.estimator`` and its submodules (``from tensorflow.estimator import export``), TF 1.x's API."""
    if isinstance(api, estimator_support.UnavailableApi):
        return {"tensorflow.estimator": api}
    return {("tensorflow.estimator." + name).rstrip("."): module for name, module in api.v1_modules.items()}


def _estimator_v1(api) -> types.ModuleType:
    return api if isinstance(api, estimator_support.UnavailableApi) else api.v1


def build(estimator_api) -> tuple[LegacyModule, dict[str, types.ModuleType]]:
    """The legacy ``tensorflow`` module and the submodules to register beside it. No side effects.

    ``estimator_api`` is what ``estimator_support.load_or_explain()`` returned.
    """
    train = LegacyModule(
        "tensorflow.train",
        "train.",
        _v1.train,
        {
            "Server": task_context.Server,
            "Supervisor": supervision.Supervisor,
            "SessionManager": supervision.SessionManager,
            "MonitoredTrainingSession": supervision.MonitoredTrainingSession,
            "SyncReplicasOptimizer": supervision.SyncReplicasOptimizer,
        },
    )
    submodules = {**_examples(), **contrib.MODULES, **_estimator_modules(estimator_api)}
    members = {
        "train": train,
        "estimator": _estimator_v1(estimator_api),
        "Session": supervision.Session,
        "contrib": contrib.contrib,
        "examples": submodules["tensorflow.examples"],
        # The real package: tf_keras and TF itself run ``import tensorflow.compat.v2 as tf``.
        "compat": _real_tf.compat,
        "__path__": _real_tf.__path__,
        "__version__": _real_tf.__version__,
        # importlib.util.find_spec("tensorflow") (etils, tensorflow_datasets) reads the module's spec.
        "__spec__": _real_tf.__spec__,
        "__file__": _real_tf.__file__,
        "__loader__": _real_tf.__loader__,
    }
    legacy = LegacyModule("tensorflow", "", _v1, members, fallback=_real_tf)
    return legacy, {"tensorflow.train": train, **submodules}


# The session and server classes whose start and end the compat layer fixes (compat.supervision, task_context).
_STARTS_AND_ENDS = ("Server", "Supervisor", "SessionManager", "MonitoredTrainingSession", "SyncReplicasOptimizer")


def _serve_compat_v1(legacy: LegacyModule) -> None:
    """``import tensorflow.compat.v1 as tf`` scripts get the same starts and ends as TF 1.x ones: the
    compat layer's session and server classes in tf.compat.v1 too (each one subclasses or calls
    TensorFlow's own, captured when it was defined)."""
    for name in _STARTS_AND_ENDS:
        setattr(_v1.train, name, legacy.train.__dict__[name])
    _v1.Session = supervision.Session


class _RemovedModuleFinder(importlib.abc.MetaPathFinder):
    """Turns ``import tensorflow.contrib.slim`` (and the like) into the one-line removed-module error."""

    def find_spec(self, fullname, path=None, target=None):
        below = any(fullname == package or fullname.startswith(package + ".") for package in _FAKE_PACKAGES)
        if below and fullname not in sys.modules:
            raise RemovedModuleError(fullname[len("tensorflow.") :])
        return None


def install() -> LegacyModule:
    """Makes ``import tensorflow`` return the legacy module; idempotent. Disables v2 behaviour."""
    current = sys.modules.get("tensorflow")
    if isinstance(current, LegacyModule):
        return current
    _v1.disable_v2_behavior()
    quiet_cancelled_queue_runners()
    task_start.install()  # every Server the script makes starts as a run_task.py task does
    # Before ``tensorflow`` is replaced: the estimator's modules import the real one.
    estimator_api = estimator_support.load_or_explain()
    if isinstance(estimator_api, estimator_support.EstimatorApi):
        from ps_toolkit_compat import estimator_roles  # imports the package, so only after load()

        estimator_roles.install()
        # ``import tensorflow.compat.v1 as tf`` scripts (TF 2.0-2.15) find tf.estimator there too.
        _v1.estimator = estimator_api.v1
        _real_tf.compat.v2.estimator = estimator_api.v2
    legacy, submodules = build(estimator_api)
    _serve_compat_v1(legacy)
    sys.modules.update(submodules)
    sys.modules.update(internal_modules.MODULES)
    tf_internals.restore_moved_names()
    internal_modules.install_finders()
    sys.modules["tensorflow"] = legacy
    sys.meta_path.insert(0, _RemovedModuleFinder())
    tfra_install.install()  # ``import tensorflow_recommenders_addons``: TFRA's graph-mode API on the toolkit's tables
    return legacy
