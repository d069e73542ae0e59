"""Loads the real ``tensorflow-estimator`` (2.15, its last release) on today's TensorFlow.

    from ps_toolkit_compat import estimator_support
    api = estimator_support.load()      # api.v1: tf.estimator of TF 1.x / tf.compat.v1; api.v2: TF 2.x's

The package is pure Python; what stops it on TF 2.16+ is a handful of TF
internals it imports that TensorFlow dropped when it stopped shipping the
estimator. ``SUPPLIED`` names each one this module provides, and why; each is
provided only where TensorFlow lacks it. ``problems()`` lists, one line each,
any TF internal this support relies on that the installed TensorFlow does not
have (tests/test_estimator_compat.py runs it, so a TensorFlow upgrade that
breaks one fails with the internal's name). The TF internals named here and
used here are declared in ``ps_toolkit.base.tf_internals``.

The estimator's modules run ``import tensorflow as tf`` at import time and
expect the real TensorFlow 2 module there (``tf.compat.v1``, ``tf.keras``),
so ``load()`` runs before the legacy module replaces ``tensorflow`` in
``sys.modules`` (compat/legacy_tf.py calls it from ``install()``).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import sys
import types

from ps_toolkit.base.errors import ConfigError
from ps_toolkit_compat import tf_internals

PACKAGE = "tensorflow_estimator"
PINNED_VERSION = "2.15.0"
ESTIMATOR_API_NAME = "estimator"

# Every TF internal supplied here: module (or module attribute) -> why.
SUPPLIED = {
    tf_internals.ESTIMATOR_TRAINING_MODULE: (
        "the bridge to TF's distribute coordinator (removed with it in TF 2.16); the estimator asks it "
        "should_run_distribute_coordinator(config) before every train_and_evaluate, and RunConfig calls "
        "init_run_config when train_distribute is set. Supplied: False, so the estimator's own between-graph "
        "path from TF_CONFIG runs; init_run_config for a local distribution strategy; its three coordinator "
        "entry points (estimator_train, estimator_evaluate, train_and_evaluate) as one-line errors"
    ),
    tf_internals.TPU_EMBEDDING_MODULE: (
        "TPU embedding tables (TF 2.16 removed the TF1 version); the estimator's TPUEstimator imports seven "
        "optimizer-parameter classes from it at import time. Supplied: those classes; using one, or any other "
        "name, is a one-line error (no TPU support)"
    ),
    tf_internals.TPU_SESSION_SUPPORT_MODULE: (
        "TPU worker watchdogs and shutdown hooks, imported by TPUEstimator at import time; any use is a one-line error"
    ),
    tf_internals.TPU_EMBEDDING_GRADIENT_MODULE: (
        "gradients through TPU embedding tables, imported by TPUEstimator at import time; any use is a one-line error"
    ),
    tf_internals.ESTIMATOR_API_NAME_ATTRIBUTE: (
        "the 'estimator' API name every @estimator_export decorator passes to tf_export.api_export, and its "
        "API_ATTRS / API_ATTRS_V1 entries (the attribute names that hold a symbol's exported names)"
    ),
}

# The TPU optimizer-parameter classes TPUEstimator imports by name.
_TPU_EMBEDDING_CLASSES = (
    "AdagradParameters",
    "AdamParameters",
    "FtrlParameters",
    "MomentumParameters",
    "ProximalAdagradParameters",
    "RMSPropParameters",
    "StochasticGradientDescentParameters",
)


@dataclasses.dataclass(frozen=True)
class EstimatorApi:
    """The estimator's public namespaces: ``v1`` (TF 1.x, tf.compat.v1) and ``v2`` (TF 2.x)."""

    v1: types.ModuleType
    v2: types.ModuleType
    # Every module of the v1 API package, by its name below ``tensorflow.estimator`` ("" is the package).
    v1_modules: dict


class TpuRemovedError(ConfigError, AttributeError):
    """A TPU-only internal of the estimator was used; an AttributeError, so ``hasattr`` still answers False."""

    def __init__(self, name: str):
        super().__init__(
            f"{name} is TPUEstimator support that TensorFlow 2.16 removed; TPUEstimator does not run here "
            "(use tf.estimator.Estimator, or tf.distribute.TPUStrategy)"
        )


class _TpuOnlyModule(types.ModuleType):
    """A supplied TPU module: its listed members, and a TpuRemovedError for anything else."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise TpuRemovedError(f"{self.__name__}.{name}")


class EstimatorUnavailableError(ConfigError, AttributeError):
    """``tf.estimator`` could not be loaded; says why. An AttributeError, so ``hasattr(tf, ...)`` answers False."""


class UnavailableApi(types.ModuleType):
    """Stands in for ``tf.estimator`` when it cannot be loaded: every use is one line saying why."""

    def __init__(self, reason: str):
        super().__init__("tensorflow.estimator", reason)
        self._reason = reason

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise EstimatorUnavailableError(f"tf.estimator.{name} is unavailable: {self._reason}")


def _tpu_only_class(module: str, name: str) -> type:
    def __init__(self, *args, **kwargs):
        raise TpuRemovedError(f"{module}.{name}")

    return type(name, (), {"__init__": __init__, "__module__": module})


def _tpu_module(name: str, class_names=()) -> types.ModuleType:
    module = _TpuOnlyModule(name, SUPPLIED[name])
    for class_name in class_names:
        setattr(module, class_name, _tpu_only_class(name, class_name))
    return module


def should_run_distribute_coordinator(config) -> bool:
    """Always False: the distribute coordinator is gone; train_and_evaluate runs between-graph from TF_CONFIG."""
    del config
    return False


def init_run_config(config, tf_config: dict) -> None:
    """RunConfig set-up when a distribution strategy is given (RunConfig calls it).

    A strategy inside one process (MirroredStrategy) keeps working. Spread over
    a TF_CONFIG cluster it ran on the distribute coordinator, which TensorFlow
    removed: that is a one-line error pointing at between-graph training.
    """
    train_distribute, eval_distribute, experimental = tf_internals.run_config_strategies(config)
    if experimental is not None:
        train_distribute = train_distribute or experimental.train_distribute
        eval_distribute = eval_distribute or experimental.eval_distribute
        tf_internals.set_run_config_strategies(config, train_distribute, eval_distribute)
        if getattr(experimental, "remote_cluster", None):
            raise ConfigError(
                "RunConfig(experimental_distribute=DistributeConfig(remote_cluster=...)) needs TensorFlow's "
                "distribute coordinator, which TensorFlow 2.16 removed"
            )
    if tf_config.get("cluster") and train_distribute is not None:
        raise ConfigError(
            f"RunConfig(train_distribute={type(train_distribute).__name__}) with a TF_CONFIG cluster ran on "
            "TensorFlow's distribute coordinator, which TensorFlow 2.16 removed; leave train_distribute unset "
            "for parameter-server (between-graph) training from TF_CONFIG"
        )
    tf_internals.init_run_config_cluster(config, tf_config)


def _coordinator_only(name: str):
    """A coordinator entry point: reached only in coordinator mode, which init_run_config never sets."""

    def refuse(*args, **kwargs):
        raise ConfigError(f"estimator_training.{name} needs TensorFlow's distribute coordinator, removed in TF 2.16")

    refuse.__name__ = name
    return refuse


def _estimator_training_module() -> types.ModuleType:
    name = tf_internals.ESTIMATOR_TRAINING_MODULE
    module = types.ModuleType(name, SUPPLIED[name])
    module.should_run_distribute_coordinator = should_run_distribute_coordinator
    module.init_run_config = init_run_config
    for entry in ("estimator_train", "estimator_evaluate", "train_and_evaluate"):
        setattr(module, entry, _coordinator_only(entry))
    return module


def _missing(module_name: str) -> bool:
    if module_name in sys.modules:
        return False
    try:
        return importlib.util.find_spec(module_name) is None
    except ModuleNotFoundError:
        return True


def _supply_modules() -> None:
    builders = {
        tf_internals.ESTIMATOR_TRAINING_MODULE: _estimator_training_module,
        tf_internals.TPU_EMBEDDING_MODULE: lambda: _tpu_module(
            tf_internals.TPU_EMBEDDING_MODULE, _TPU_EMBEDDING_CLASSES
        ),
        tf_internals.TPU_SESSION_SUPPORT_MODULE: lambda: _tpu_module(tf_internals.TPU_SESSION_SUPPORT_MODULE),
        tf_internals.TPU_EMBEDDING_GRADIENT_MODULE: lambda: _tpu_module(tf_internals.TPU_EMBEDDING_GRADIENT_MODULE),
    }
    for name, build in builders.items():
        if _missing(name):
            module = build()
            sys.modules[name] = module
            parent, _, child = name.rpartition(".")
            setattr(importlib.import_module(parent), child, module)


def problems() -> list[str]:
    """What the installed TensorFlow lacks that this support relies on; one line each, empty when all is well."""
    # The estimator's own internals are checked once it is loaded (tests/test_tf_internals.py): it cannot import yet.
    found = tf_internals.missing(
        use
        for use in tf_internals.USES
        if use.used_by == tf_internals.ESTIMATOR_SUPPORT and not use.owner.startswith(PACKAGE)
    )
    if importlib.util.find_spec(PACKAGE) is None:
        found.append(f"the {PACKAGE} package is not installed (pip install tensorflow-estimator=={PINNED_VERSION})")
    return found


def load_or_explain() -> EstimatorApi | UnavailableApi:
    """``load()``, or a stand-in whose every use says why it failed (scripts without tf.estimator still run)."""
    try:
        return load()
    except ConfigError as err:
        return UnavailableApi(str(err))


def load() -> EstimatorApi:
    """Supplies the dropped internals, imports the package and returns its API namespaces. Idempotent.

    Raises ConfigError (one line) when the package is missing or TensorFlow
    lacks something the support needs.
    """
    found = problems()
    if found:
        raise ConfigError("tf.estimator cannot be loaded: " + "; ".join(found))
    _supply_modules()
    tf_internals.register_export_api(ESTIMATOR_API_NAME)
    v1 = importlib.import_module(tf_internals.ESTIMATOR_API_V1_MODULE)
    v2 = importlib.import_module(tf_internals.ESTIMATOR_API_V2_MODULE)
    prefix = v1.__name__
    v1_modules = {
        name[len(prefix) + 1 :]: module
        for name, module in list(sys.modules.items())
        if (name == prefix or name.startswith(prefix + ".")) and module is not None
    }
    return EstimatorApi(v1=v1, v2=v2, v1_modules=v1_modules)
