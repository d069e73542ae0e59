"""Every private TensorFlow and tensorflow-estimator name that compat/ uses, in one place.

The compat layer's half of ``ps_toolkit.base.tf_internals``: each name is reached
through a small function or constant here, registered in ``USES`` with the file
that needs it and why no public API serves. tests/test_tf_internals.py checks both
registries against the installed TensorFlow and estimator, and fails any private
TensorFlow name used outside the two modules.
"""

from __future__ import annotations

import contextlib
import functools

from ps_toolkit.base import tf_internals as toolkit_internals
from ps_toolkit.base.tf_internals import Use, declare

USES: list[Use] = []

_ROLES = "compat/estimator_roles.py"
ESTIMATOR_SUPPORT = _SUPPORT = "compat/estimator_support.py"
_INPUTS = "compat/estimator_inputs.py"
_SUPERVISION = "compat/supervision.py"


def _use(owner: str, name: str, used_by: str, why: str, example: str | None = None) -> str:
    return declare(USES, owner, name, used_by, why, example)


# --- Module names old scripts import (compat/internal_modules.py) --------------------------------------------------

_INTERNAL_MODULES = "compat/internal_modules.py"
# Names the compat layer serves, not uses: TF 1.x modules that TF 2.21 moved or dropped.
TF1_THREADPOOL_MODULE = "tensorflow.python.data.experimental.ops.threadpool"
TF1_ESTIMATOR_ALIAS = "tensorflow.python.estimator"
# Where TF 1.14-2.15 forwarded TF1_ESTIMATOR_ALIAS to: the estimator package's own modules.
ESTIMATOR_PACKAGE_MODULE = "tensorflow_estimator.python"
ESTIMATOR_PACKAGE = (
    ESTIMATOR_PACKAGE_MODULE
    + "."
    + _use(
        ESTIMATOR_PACKAGE_MODULE,
        "estimator",
        _INTERNAL_MODULES,
        "old scripts import tensorflow.python.estimator.X, which TF 1.14-2.15 forwarded to this package's modules",
    )
)

# TF 1.x names that TF 2.13-2.21 moved out of their module into another one; old scripts (tf_cnn_benchmarks'
# TF 1.15 branch) reach them at the old place: (old module, name, the module that holds it now).
MOVED_NAMES = (
    (
        "tensorflow.python.framework.ops",
        "register_tensor_conversion_function",
        "tensorflow.python.framework.tensor_conversion_registry",
    ),
    ("tensorflow.python.ops.variables", "VariableV1", "tensorflow.python.ops.variable_v1"),
)
for _old, _name, _new in MOVED_NAMES:
    _use(
        _old.rsplit(".", 1)[0],
        _old.rsplit(".", 1)[1],
        _INTERNAL_MODULES,
        f"the module TF 1.x scripts import {_name} from",
    )
    _use(_new, _name, _INTERNAL_MODULES, f"{_name} itself, served again as {_old}.{_name} for TF 1.x scripts")


def restore_moved_names() -> None:
    """Puts each of ``MOVED_NAMES`` back where TF 1.x had it (the same object under both names); idempotent."""
    import importlib

    for old, name, new in MOVED_NAMES:
        module = importlib.import_module(old)
        if not hasattr(module, name):
            setattr(module, name, getattr(importlib.import_module(new), name))


# --- Sessions and SyncReplicasOptimizer (compat/supervision.py) --------------------------------------------------

_CLOSED = _use(
    "tensorflow.python.client.session.BaseSession",
    "_closed",
    _SUPERVISION,
    "whether tf.compat.v1.Session.close() ran; a closed session cannot run the release ops, and Session "
    "has no public closed flag",
)
_SYNC_TOKEN_QUEUE = _use(
    "tensorflow.python.training.sync_replicas_optimizer.SyncReplicasOptimizer",
    "_sync_token_queue",
    _SUPERVISION,
    "the optimizer's shared token queue, which replicas block on; refilled when a replica ends so the others "
    "finish. The optimizer exposes only get_init_tokens_op, which needs the chief",
)


_DEFERRED_READS = "compat/tfra/deferred_reads.py"
_BASE_SESSION = "tensorflow.python.client.session"
_use(
    _BASE_SESSION,
    "BaseSession",
    _DEFERRED_READS,
    "the class whose run every session runs through (Session, InteractiveSession, MonitoredSession's inner one): "
    "a TFRA script's lookups are read together before the graph runs",
)


def base_session_class() -> type:
    """The class every TF1 session's ``run`` and ``make_callable`` are."""
    from tensorflow.python.client import session

    return session.BaseSession


def session_closed(session) -> bool:
    """Whether a tf.compat.v1.Session has been closed."""
    return bool(getattr(session, _CLOSED))


def sync_token_queue(optimizer):
    """A tf.compat.v1.train.SyncReplicasOptimizer's token queue; None until its gradients are applied."""
    return getattr(optimizer, _SYNC_TOKEN_QUEUE, None)


_SYNC_HOOK = _use(
    "tensorflow.python.training.sync_replicas_optimizer",
    "_SyncReplicasOptimizerHook",
    _ROLES,
    "the type of the hook SyncReplicasOptimizer.make_session_run_hook returns: how a model_fn's sync optimizer "
    "is found among the estimator's hooks",
)
_HOOK_OPTIMIZER = _use(
    "tensorflow.python.training.sync_replicas_optimizer._SyncReplicasOptimizerHook",
    "_sync_optimizer",
    _ROLES,
    "the optimizer a sync hook was made by; the hook has no public accessor",
)


def sync_optimizers_of_hooks(hooks) -> list:
    """The SyncReplicasOptimizers whose make_session_run_hook() hooks are among ``hooks``."""
    from tensorflow.python.training import sync_replicas_optimizer

    hook_type = getattr(sync_replicas_optimizer, _SYNC_HOOK)
    return [getattr(hook, _HOOK_OPTIMIZER) for hook in hooks if isinstance(hook, hook_type)]


# --- tensorflow-estimator: the per-role executor of train_and_evaluate (compat/estimator_roles.py) ---------------

_ESTIMATOR = "tensorflow_estimator.python.estimator"
_EXECUTOR = _use(
    f"{_ESTIMATOR}.training",
    "_TrainingExecutor",
    _ROLES,
    "what train_and_evaluate runs on each task (run_ps, run_chief, run_worker, run_evaluator); the estimator "
    "offers no hook to change how a role starts or ends",
)
_START_STD_SERVER = _use(
    f"{_ESTIMATOR}.training._TrainingExecutor",
    "_start_std_server",
    _ROLES,
    "starts the task's tf.train.Server; every role calls it, so checks before the server starts go here",
)
_TRAIN_SPEC = _use(f"{_ESTIMATOR}.training._TrainingExecutor", "_train_spec", _ROLES, "the TrainSpec (max_steps)")
_EVAL_LISTENER = _use(
    f"{_ESTIMATOR}.training._TrainingExecutor",
    "_continuous_eval_listener",
    _ROLES,
    "the evaluator's listener, wrapped so the evaluator ends when the chief's training is over",
)
_EVAL_LISTENER_CLASS = _use(
    f"{_ESTIMATOR}.training",
    "_ContinuousEvalListener",
    _ROLES,
    "the listener type train_and_evaluate's executor checks its listener against",
)
_DELAY_PER_WORKER = _use(
    f"{_ESTIMATOR}.training", "_DELAY_SECS_PER_WORKER", _ROLES, "a worker's start delay per task index (5 s)"
)
_MAX_DELAY = _use(f"{_ESTIMATOR}.training", "_MAX_DELAY_SECS", _ROLES, "the longest worker start delay (60 s)")
_use(
    f"{_ESTIMATOR}.training",
    "time",
    _ROLES,
    "the time module the executor sleeps and polls with: replaced so the evaluator's waits can end early",
)
_use(
    f"{_ESTIMATOR}.estimator",
    "training",
    _ROLES,
    "tf.compat.v1.train as the Estimator calls it: replaced so its MonitoredTrainingSession is compat's",
)


@functools.cache
def training_executor_base() -> type:
    """The estimator's per-role executor, with public names for what a subclass overrides and reads.

    A subclass overrides ``start_std_server(config)`` (every role starts its
    server through it) and reads ``train_spec`` and ``continuous_eval_listener``.
    """
    from tensorflow_estimator.python.estimator import training

    private = getattr(training, _EXECUTOR)

    def start_std_server(self, config):
        return getattr(private, _START_STD_SERVER)(self, config)

    def redirect(self, config):
        return self.start_std_server(config)

    def listener(self):
        return getattr(self, _EVAL_LISTENER)

    def set_listener(self, value):
        setattr(self, _EVAL_LISTENER, value)

    members = {
        "__doc__": training_executor_base.__doc__,
        "start_std_server": start_std_server,
        _START_STD_SERVER: redirect,
        "train_spec": property(lambda self: getattr(self, _TRAIN_SPEC)),
        "continuous_eval_listener": property(listener, set_listener),
    }
    return type("TrainingExecutorBase", (private,), members)


def continuous_eval_listener_class() -> type:
    """The estimator's evaluator listener type (before_eval, after_eval, on_start), to subclass."""
    from tensorflow_estimator.python.estimator import training

    return getattr(training, _EVAL_LISTENER_CLASS)


def installed_training_executor() -> type:
    """The executor class train_and_evaluate instantiates now."""
    from tensorflow_estimator.python.estimator import training

    return getattr(training, _EXECUTOR)


def install_training_executor(executor: type, worker_delay_secs: float, max_worker_delay_secs: float, clock) -> None:
    """Makes train_and_evaluate run ``executor``, with these worker start delays and ``clock`` as its time module."""
    from tensorflow_estimator.python.estimator import training

    setattr(training, _EXECUTOR, executor)
    setattr(training, _DELAY_PER_WORKER, worker_delay_secs)
    setattr(training, _MAX_DELAY, max_worker_delay_secs)
    training.time = clock


def estimator_train_module():
    """The tf.compat.v1.train module the Estimator builds its sessions with."""
    from tensorflow_estimator.python.estimator import estimator

    return estimator.training


def set_estimator_train_module(module) -> None:
    """Makes the Estimator build its sessions with ``module`` in place of tf.compat.v1.train."""
    from tensorflow_estimator.python.estimator import estimator

    estimator.training = module


# --- tf.contrib.lookup (compat/contrib_names.py) ---------------------------------------------------------------

_LOOKUP_OPS = "tensorflow.python.ops.lookup_ops"
LOOKUP_FUNCTIONS = tuple(
    _use(
        _LOOKUP_OPS,
        name,
        "compat/contrib_names.py",
        "tf.contrib.lookup's name for it; TensorFlow 2 kept the function in lookup_ops with no public name",
    )
    for name in (
        "index_table_from_tensor",
        "index_table_from_file",
        "index_to_string_table_from_tensor",
        "index_to_string_table_from_file",
        "IdTableWithHashBuckets",
        "HashTable",
        "MutableDenseHashTable",
    )
)


def lookup_function(name: str):
    """``tensorflow.python.ops.lookup_ops.<name>``, one of LOOKUP_FUNCTIONS."""
    import importlib

    if name not in LOOKUP_FUNCTIONS:
        raise KeyError(name)
    return getattr(importlib.import_module(_LOOKUP_OPS), name)


# --- tensorflow-estimator: RunConfig and input_fn results (compat/estimator_inputs.py, estimator_support.py) ------

_RUN_CONFIG = f"{_ESTIMATOR}.run_config.RunConfig"
_use(f"{_ESTIMATOR}.run_config", "RunConfig", _INPUTS, "the class whose constructor reads TF_CONFIG")
_CLUSTER_SETTING = _use(
    _RUN_CONFIG,
    "_init_distributed_setting_from_environment_var",
    _INPUTS,
    "where RunConfig reads the cluster and task from TF_CONFIG: wrapped to turn its ValueErrors into one-line "
    "errors and leave the evaluator out of the training cluster; estimator_support calls it as TF's "
    "estimator_training.init_run_config did",
)
# RunConfig sets these fields as "_" + its argument's name; checked on a RunConfig().
_EXPERIMENTAL_DISTRIBUTE = _use(
    _RUN_CONFIG,
    "_experimental_distribute",
    _SUPPORT,
    "RunConfig(experimental_distribute=...), which has no property",
    example=_RUN_CONFIG,
)
_TRAIN_DISTRIBUTE = _use(
    _RUN_CONFIG,
    "_train_distribute",
    _SUPPORT,
    "the training strategy; the public property is read-only and init_run_config fills it in, as TF's did",
    example=_RUN_CONFIG,
)
_EVAL_DISTRIBUTE = _use(
    _RUN_CONFIG, "_eval_distribute", _SUPPORT, "the evaluation strategy, as _train_distribute", example=_RUN_CONFIG
)
_COORDINATOR_MODE = _use(
    f"{_ESTIMATOR}.estimator.Estimator",
    "_distribute_coordinator_mode",
    _SUPPORT,
    "the Estimator reads it from its RunConfig (coordinator training when set); init_run_config sets it to "
    "None, as TF's did: the coordinator is gone",
)
_PARSE_INPUT_FN_RESULT = _use(
    f"{_ESTIMATOR}.util",
    "parse_input_fn_result",
    _INPUTS,
    "where the Estimator splits an input_fn's result: wrapped to make a wrong shape a one-line error",
)


def run_config_class() -> type:
    """The estimator's RunConfig (tf.estimator.RunConfig)."""
    from tensorflow_estimator.python.estimator import run_config

    return run_config.RunConfig


def run_config_cluster_setting():
    """RunConfig's method that reads the cluster and the task from a TF_CONFIG dict: ``(self, tf_config)``."""
    return getattr(run_config_class(), _CLUSTER_SETTING)


def set_run_config_cluster_setting(method) -> None:
    """Replaces RunConfig's TF_CONFIG reading method (see run_config_cluster_setting)."""
    setattr(run_config_class(), _CLUSTER_SETTING, method)


def run_config_strategies(config) -> tuple:
    """A RunConfig's (train_distribute, eval_distribute, experimental_distribute) as given to it."""
    return tuple(getattr(config, name) for name in (_TRAIN_DISTRIBUTE, _EVAL_DISTRIBUTE, _EXPERIMENTAL_DISTRIBUTE))


def set_run_config_strategies(config, train_distribute, eval_distribute) -> None:
    """Sets a RunConfig's training and evaluation strategies."""
    setattr(config, _TRAIN_DISTRIBUTE, train_distribute)
    setattr(config, _EVAL_DISTRIBUTE, eval_distribute)


def init_run_config_cluster(config, tf_config: dict) -> None:
    """Leaves coordinator mode and reads the cluster from ``tf_config``, the end of TF's init_run_config."""
    setattr(config, _COORDINATOR_MODE, None)
    getattr(config, _CLUSTER_SETTING)(tf_config)


def input_fn_result_parser():
    """The estimator's parse_input_fn_result(result) -> (features, labels, hooks)."""
    from tensorflow_estimator.python.estimator import util

    return util.parse_input_fn_result


def set_input_fn_result_parser(function) -> None:
    """Makes the Estimator split input_fn results with ``function``."""
    from tensorflow_estimator.python.estimator import util

    util.parse_input_fn_result = function


# --- tensorflow-estimator on TensorFlow 2.16+ (compat/estimator_support.py) --------------------------------------

# Modules the estimator imports that TensorFlow 2.16 removed; estimator_support supplies them.
ESTIMATOR_TRAINING_MODULE = "tensorflow.python.distribute.estimator_training"
TPU_EMBEDDING_MODULE = "tensorflow.python.tpu.tpu_embedding"
TPU_SESSION_SUPPORT_MODULE = "tensorflow.python.tpu.session_support"
TPU_EMBEDDING_GRADIENT_MODULE = "tensorflow.python.tpu.tpu_embedding_gradient"
ESTIMATOR_API_NAME_ATTRIBUTE = "tensorflow.python.util.tf_export.ESTIMATOR_API_NAME"
# The estimator's API packages: v1 (TF 1.x, tf.compat.v1) and v2 (TF 2.x); the package itself exports only v1.
ESTIMATOR_API_V1_MODULE = "tensorflow_estimator._api.v1.estimator"
ESTIMATOR_API_V2_MODULE = "tensorflow_estimator._api.v2.estimator"

for _parent in ("distribute", "tpu"):
    _use("tensorflow.python", _parent, _SUPPORT, "the package the removed estimator modules are supplied below")
_TF_EXPORT = "tensorflow.python.util.tf_export"
_use(_TF_EXPORT, "api_export", _SUPPORT, "the decorator every @estimator_export is built on")
_ATTRIBUTES = _use(_TF_EXPORT, "_Attributes", _SUPPORT, "the record type of API_ATTRS entries")
for _table in ("API_ATTRS", "API_ATTRS_V1"):
    _use(_TF_EXPORT, _table, _SUPPORT, "the attribute names that hold each API's exported names: gets 'estimator'")


def register_export_api(name: str) -> None:
    """Teaches TensorFlow's API export an API ``name`` (the estimator's "estimator"), as TF 2.15 defined it."""
    from tensorflow.python.util import tf_export

    if not hasattr(tf_export, "ESTIMATOR_API_NAME"):
        tf_export.ESTIMATOR_API_NAME = name
    attributes = getattr(tf_export, _ATTRIBUTES)
    tf_export.API_ATTRS.setdefault(name, attributes(f"_{name}_api_names", f"_{name}_api_constants"))
    tf_export.API_ATTRS_V1.setdefault(name, attributes(f"_{name}_api_names_v1", f"_{name}_api_constants_v1"))


# --- TFRA checkpoints restored into the tables (compat/tfra/checkpoint_import.py) ----------------------------------

_UNFINALIZE = _use(
    "tensorflow.python.framework.ops.Graph",
    "_unsafe_unfinalize",
    "compat/tfra/checkpoint_import.py",
    "a TFRA checkpoint is found only when the Saver restores, after MonitoredTrainingSession finalized the graph; "
    "its rows go in by ops added then, and no public API reopens a finalized graph",
)


@contextlib.contextmanager
def unfinalized(graph):
    """Ops may be added to ``graph`` inside, finalized or not; a finalized graph is finalized again after."""
    was_finalized = graph.finalized
    if was_finalized:
        getattr(graph, _UNFINALIZE)()
    try:
        yield
    finally:
        if was_finalized:
            graph.finalize()


# --- TFRA's Variable in a Saver's var_list (compat/tfra/variable.py, variable_ops.py) ------------------------------

TRACKABLE_MODULE = "tensorflow.python.trackable.base"
_GATHER_SAVEABLES = _use(
    f"{TRACKABLE_MODULE}.Trackable",
    "_gather_saveables_for_checkpoint",
    "compat/tfra/variable_ops.py",
    "what a tf.compat.v1.train.Saver saves of an object in its var_list; TFRA's Variable is one, no public hook",
)
_use(
    f"{TRACKABLE_MODULE}.Trackable",
    "_gather_saveables_for_checkpoint",
    "compat/tfra/variable.py",
    "what a tf.compat.v1.train.Saver saves of a TFRA Variable in its var_list: its shards' saveables",
)
ALL_REDUCE_MODULE = "tensorflow.python.distribute.all_reduce"  # served again by compat/all_reduce.py


def trackable_base() -> type:
    """TensorFlow's Trackable, the base of what a Saver's var_list may hold besides variables."""
    import importlib

    return importlib.import_module(TRACKABLE_MODULE).Trackable


def missing(uses=None) -> list[str]:
    """One line for each name of this registry (or of ``uses``) the installed packages lack; empty when all is there."""
    return toolkit_internals.missing(USES if uses is None else uses)
