"""Every private TensorFlow and tensorflow-estimator name that ps_toolkit and compat/ use, in one place.

Each is reached through a small function or constant here, registered in
``USES`` with the file that needs it and why no public API serves.
tests/test_tf_internals.py checks every registered name against the installed
TensorFlow and estimator, so an upgrade that drops one fails naming it, and
fails any private TensorFlow name used outside this module.

TensorFlow is imported inside the functions: the base layer imports without it
(the fork server must not start TensorFlow's runtime before it forks).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
import sys


@dataclasses.dataclass(frozen=True)
class Use:
    """One private name: ``owner`` (a dotted module or module.Class path) has ``name``, which ``used_by`` needs.

    An attribute that only instances get from a computed name is checked on
    ``example()``, the callable at that dotted path, when one is given.
    """

    owner: str
    name: str
    used_by: str
    why: str
    example: str | None = None

    @property
    def path(self) -> str:
        return f"{self.owner}.{self.name}"


USES: list[Use] = []


def _use(owner: str, name: str, used_by: str, why: str, example: str | None = None) -> str:
    USES.append(Use(owner, name, used_by, why, example))
    return name


_FORK_SERVER = "ps_toolkit/process/fork_server.py"
_CHECKPOINTS = "ps_toolkit/task/checkpoints.py"
_MONITORED = "ps_toolkit/task/roles/trainer.py"
_ROLES = "compat/estimator_roles.py"
ESTIMATOR_SUPPORT = _SUPPORT = "compat/estimator_support.py"
_INPUTS = "compat/estimator_inputs.py"
_SUPERVISION = "compat/supervision.py"
_HOOKS = "ps_toolkit/training/queue_runners.py"

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

# --- TensorFlow's eager runtime (the fork server) ---------------------------------------------------------------

EAGER_CONTEXT_MODULE = "tensorflow.python.eager.context"
_use(
    EAGER_CONTEXT_MODULE,
    "context_safe",
    _FORK_SERVER,
    "the process's eager context, or None, without creating one (tf.executing_eagerly() would create it)",
)
_CONTEXT_HANDLE = _use(
    f"{EAGER_CONTEXT_MODULE}.Context",
    "_context_handle",
    _FORK_SERVER,
    "set once the context's C++ runtime (and its threads) started; no public API says whether it has, "
    "and forking after it has is unsafe",
)


def eager_runtime_started() -> bool:
    """Whether this process created TensorFlow's eager runtime. Never imports TensorFlow."""
    context = sys.modules.get(EAGER_CONTEXT_MODULE)
    current = context.context_safe() if context is not None else None
    return current is not None and getattr(current, _CONTEXT_HANDLE, None) is not None


# --- AutoGraph's generated source files (a task's fast exit) -------------------------------------------------------

_AUTOGRAPH_MODULE_PREFIX = "__autograph_generated_file"
_use(
    "tensorflow.python.autograph.pyct.loader",
    "load_source",
    "ps_toolkit/tools/run_task.py",
    f"writes each converted function's source to a temp file {_AUTOGRAPH_MODULE_PREFIX}*.py, loaded as the module "
    "of that name, and removes it at interpreter exit (atexit), which a task's os._exit skips",
)


def remove_autograph_files() -> list[str]:
    """Deletes the source files AutoGraph wrote for this process's converted functions; returns their paths."""
    removed = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None) if name.startswith(_AUTOGRAPH_MODULE_PREFIX) else None
        # With its compiled form, which Python wrote to $TMPDIR/__pycache__ (unless told not to write bytecode).
        for each in (path, importlib.util.cache_from_source(path)) if path else ():
            try:
                os.remove(each)
                removed.append(each)
            except OSError:  # gone already, never written, or not ours to remove: nothing to clean
                pass
    caches = {os.path.dirname(path) for path in removed if os.path.basename(os.path.dirname(path)) == "__pycache__"}
    for folder in caches:
        try:
            os.rmdir(folder)  # only when nothing else is left in it
        except OSError:
            pass
    return removed


# --- Checkpoint keys (checkpoint reuse checks) -------------------------------------------------------------------

_SAVEABLE_MODULE = "tensorflow.python.training.saving.saveable_object_util"
_use(
    _SAVEABLE_MODULE,
    "op_list_to_dict",
    _CHECKPOINTS,
    "the checkpoint key of each variable as tf.compat.v1.train.Saver names it; Saver exposes no mapping",
)
_SAVE_SLICE_INFO = _use(
    "tensorflow.python.ops.variables.Variable",
    "_save_slice_info",
    _CHECKPOINTS,
    "a partitioned variable's slice knows the whole variable's shape, the shape its checkpoint key holds; "
    "the slices op_list_to_dict returns have no public full shape",
)


def saver_keyed_variables(variables) -> dict:
    """{checkpoint key: variable, or the list of slices of a partitioned variable}, as the Saver keys them."""
    from tensorflow.python.training.saving import saveable_object_util

    return saveable_object_util.op_list_to_dict(list(variables))


def partitioned_full_shape(slices) -> list[int]:
    """The whole shape of the partitioned variable whose slices (as saver_keyed_variables lists them) are given."""
    return list(getattr(slices[0], _SAVE_SLICE_INFO).full_shape)


# --- Dynamic embedding tables (their saveables, the optimizers' hyperparameters) ----------------------------------

_TABLE_SAVING = "ps_toolkit/dynamic_embedding/saving.py"
_ROW_RULES = "ps_toolkit/dynamic_embedding/row_rules.py"
_SAVEABLE_OBJECT_MODULE = "tensorflow.python.training.saving.saveable_object"
_use(
    _SAVEABLE_OBJECT_MODULE,
    "SaveableObject",
    _TABLE_SAVING,
    "tf.compat.v1.train.Saver saves a hash table shard only through a SaveableObject; none is public",
)
_use(_SAVEABLE_OBJECT_MODULE, "SaveSpec", _TABLE_SAVING, "the tensors a SaveableObject saves, under their names")

_TRAIN = "tensorflow.python.training"
# (optimizer class, {hyperparameter: attribute}); a TF1 optimizer keeps its constructor's arguments only in these.
_OPTIMIZER_FIELDS = (
    (f"{_TRAIN}.gradient_descent.GradientDescentOptimizer", {"learning_rate": "_learning_rate"}),
    (
        f"{_TRAIN}.momentum.MomentumOptimizer",
        {"learning_rate": "_learning_rate", "momentum": "_momentum", "use_nesterov": "_use_nesterov"},
    ),
    (
        f"{_TRAIN}.adagrad.AdagradOptimizer",
        {"learning_rate": "_learning_rate", "initial_accumulator_value": "_initial_accumulator_value"},
    ),
    (
        f"{_TRAIN}.adam.AdamOptimizer",
        {"learning_rate": "_lr", "beta1": "_beta1", "beta2": "_beta2", "epsilon": "_epsilon"},
    ),
    (
        f"{_TRAIN}.ftrl.FtrlOptimizer",
        {
            "learning_rate": "_learning_rate",
            "learning_rate_power": "_learning_rate_power",
            "initial_accumulator_value": "_initial_accumulator_value",
            "l1": "_l1_regularization_strength",
            "l2": "_l2_regularization_strength",
            "l2_shrinkage": "_l2_shrinkage_regularization_strength",
            "beta": "_beta",
        },
    ),
    (
        f"{_TRAIN}.rmsprop.RMSPropOptimizer",
        {
            "learning_rate": "_learning_rate",
            "decay": "_decay",
            "momentum": "_momentum",
            "epsilon": "_epsilon",
            "centered": "_centered",
        },
    ),
)
for _owner, _fields in _OPTIMIZER_FIELDS:
    for _attribute in _fields.values():
        _use(_owner, _attribute, _ROW_RULES, "a TF1 optimizer's hyperparameter, which it exposes no other way")


def saveable_classes() -> tuple[type, type]:
    """(SaveableObject, SaveSpec): what tf.compat.v1.train.Saver saves besides variables."""
    from tensorflow.python.training.saving import saveable_object

    return saveable_object.SaveableObject, saveable_object.SaveSpec


def optimizer_hyperparameters(optimizer) -> tuple[str, dict] | None:
    """(the optimizer class's name, {hyperparameter: value}) for a TF1 optimizer the tables can apply; else None."""
    for owner, fields in _OPTIMIZER_FIELDS:
        module_name, class_name = owner.rsplit(".", 1)
        cls = getattr(sys.modules.get(module_name), class_name, None)
        if cls is not None and isinstance(optimizer, cls):
            return class_name, {field: getattr(optimizer, attribute) for field, attribute in fields.items()}
    return None


# --- CheckpointSaverHook (the chief's saving hooks) --------------------------------------------------------------

_SET_STEPS_PER_RUN = _use(
    "tensorflow.python.training.basic_session_run_hooks.CheckpointSaverHook",
    "_set_steps_per_run",
    _MONITORED,
    "how many steps one session.run takes, so the hook reads the global step only when a save may be due; "
    "only MonitoredTrainingSession and Estimator set it, through this private method",
)


def set_saver_steps_per_run(hook, steps_per_run: int) -> None:
    """Tells a tf.compat.v1.train.CheckpointSaverHook that one session.run advances ``steps_per_run`` steps."""
    getattr(hook, _SET_STEPS_PER_RUN)(steps_per_run)


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


# --- The chief's sync aggregation thread (ps_toolkit/training/queue_runners.py) --------------------------------

_QUEUE_RUNNER = "tensorflow.python.training.queue_runner_impl.QueueRunner"
_QUEUE_RUNNER_RUN = _use(
    _QUEUE_RUNNER,
    "_run",
    _HOOKS,
    "the loop of one queue-runner thread; wrapped so that the chief's step, blocked on its token, is woken "
    "when the aggregation fails (QueueRunner reports the error only to the coordinator)",
)


@functools.cache
def queue_runner_base() -> type:
    """``tf.compat.v1.train.QueueRunner`` whose thread loop is the public ``run_thread(sess, enqueue_op, coord)``."""
    import tensorflow as tf

    private = tf.compat.v1.train.QueueRunner

    def run_thread(self, sess, enqueue_op, coord=None):
        return getattr(private, _QUEUE_RUNNER_RUN)(self, sess, enqueue_op, coord)

    def redirect(self, sess, enqueue_op, coord=None):
        return self.run_thread(sess, enqueue_op, coord)

    members = {"__doc__": queue_runner_base.__doc__, "run_thread": run_thread, _QUEUE_RUNNER_RUN: redirect}
    return type("QueueRunnerBase", (private,), members)


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


# --- Declared only: PerReplicaSyncOptimizer's use of its TensorFlow base's private state ---------------------------
# ps_toolkit/training/sync_replicas.py subclasses tf.compat.v1.train.SyncReplicasOptimizer and builds the same
# graph with per-replica token queues; TF's own methods (make_session_run_hook, get_chief_queue_runner, the
# hook's begin) read these members, so the subclass sets or reads them as TF's apply_gradients does. No public
# API exposes them; they are declared here so an upgrade that renames one fails the registry check.

_SYNC_OPTIMIZER = "tensorflow.python.training.sync_replicas_optimizer.SyncReplicasOptimizer"
_SYNC_REPLICAS = "ps_toolkit/training/sync_replicas.py"
for _name, _why in (
    ("_opt", "the wrapped optimizer, which applies the aggregated gradients"),
    ("_name", "the name scope TF builds the accumulators under"),
    ("_replicas_to_aggregate", "how many gradients each accumulator takes"),
    ("_total_num_replicas", "how many replicas get a token queue"),
    ("_global_step", "the global step the hook and the chief's init op read"),
    ("_local_step", "the replica's local step, the stamp of its gradients"),
    ("_accumulator_list", "(accumulator, device) pairs the chief's init op sets the global step of"),
    ("_sync_token_queue", "the queue the hook's begin and get_init_tokens_op use: the replica's own"),
    ("_chief_queue_runner", "the chief's queue runner, returned by get_chief_queue_runner"),
    ("_gradients_applied", "TF's methods refuse to run until apply_gradients set it"),
):
    _use(_SYNC_OPTIMIZER, _name, _SYNC_REPLICAS, _why)


# --- Checking the registry --------------------------------------------------------------------------------------


def _resolve(path: str):
    """The module, class or attribute at a dotted ``path``; raises LookupError when any part is gone."""
    import importlib

    parts = path.split(".")
    for split in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for part in parts[split:]:
            if not hasattr(found, part):
                raise LookupError(path)
            found = getattr(found, part)
        return found
    raise LookupError(path)


def _names_in_code(code) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _names_in_code(const)
    return names


def referenced_names(cls: type) -> set[str]:
    """Attribute names the class's own methods (and its bases') refer to: where instance attributes are set."""
    names = set()
    for klass in cls.__mro__:
        for member in vars(klass).values():
            for function in (member, getattr(member, "fget", None), getattr(member, "fset", None)):
                code = getattr(function, "__code__", None)
                if code is not None:
                    names |= _names_in_code(code)
    return names


def has(use: Use) -> bool:
    """Whether the installed TensorFlow (or estimator) still has ``use``'s name."""
    try:
        owner = _resolve(use.owner)
    except LookupError:
        return False
    if use.example is not None:
        return hasattr(_resolve(use.example)(), use.name)
    if hasattr(owner, use.name):
        return True
    if isinstance(owner, type):
        return use.name in referenced_names(owner)
    try:
        _resolve(use.path)
    except LookupError:
        return False
    return True


def missing(uses=None) -> list[str]:
    """One line for each registered name (or each of ``uses``) the installed packages lack; empty when all is there."""
    from importlib import metadata

    lines = []
    for use in USES if uses is None else uses:
        if has(use):
            continue
        estimator = use.owner.startswith("tensorflow_estimator")
        package, name = ("tensorflow-estimator", "tensorflow-estimator") if estimator else ("tensorflow", "TensorFlow")
        lines.append(f"{name} {metadata.version(package)} no longer has {use.path} used by {use.used_by}: {use.why}")
    return lines
