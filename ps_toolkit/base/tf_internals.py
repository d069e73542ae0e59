"""Every private TensorFlow name that ps_toolkit uses, in one place (compat/'s own are in compat/tf_internals.py).

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


def declare(uses: list[Use], owner: str, name: str, used_by: str, why: str, example: str | None = None) -> str:
    """Adds one private name to the registry ``uses`` (this module's USES, or the compat layer's).

    Args:
        uses: The registry the name is added to.
        owner: The dotted module or module.Class path that has ``name``.
        name: The private name.
        used_by: The file (relative to the repository) that needs it.
        why: Why no public API serves.
        example: A callable's dotted path whose result has ``name``, for attributes set per instance.

    Returns:
        ``name``, so that a module can keep it in a constant as it registers it.
    """
    uses.append(Use(owner, name, used_by, why, example))
    return name


def _use(owner: str, name: str, used_by: str, why: str, example: str | None = None) -> str:
    return declare(USES, owner, name, used_by, why, example)


_FORK_SERVER = "ps_toolkit/process/fork_server.py"
_CHECKPOINTS = "ps_toolkit/task/checkpoints.py"
_MONITORED = "ps_toolkit/task/roles/trainer.py"
_HOOKS = "ps_toolkit/training/queue_runners.py"

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
_use(
    "tensorflow.python.ops.resources",
    "register_resource",
    _TABLE_SAVING,
    "a Scaffold's init, ready and ready-for-local-init ops cover shared resources only through this registry",
)

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
    (f"{_TRAIN}.adadelta.AdadeltaOptimizer", {"learning_rate": "_lr", "rho": "_rho", "epsilon": "_epsilon"}),
    (
        f"{_TRAIN}.adagrad_da.AdagradDAOptimizer",
        {
            "learning_rate": "_learning_rate",
            "initial_accumulator_value": "_initial_gradient_squared_accumulator_value",
            "l1": "_l1_regularization_strength",
            "l2": "_l2_regularization_strength",
            "global_step": "_global_step",
        },
    ),
    (
        f"{_TRAIN}.proximal_adagrad.ProximalAdagradOptimizer",
        {
            "learning_rate": "_learning_rate",
            "initial_accumulator_value": "_initial_accumulator_value",
            "l1": "_l1_regularization_strength",
            "l2": "_l2_regularization_strength",
        },
    ),
    (
        f"{_TRAIN}.proximal_gradient_descent.ProximalGradientDescentOptimizer",
        {
            "learning_rate": "_learning_rate",
            "l1": "_l1_regularization_strength",
            "l2": "_l2_regularization_strength",
        },
    ),
)
for _owner, _fields in _OPTIMIZER_FIELDS:
    for _attribute in _fields.values():
        _use(_owner, _attribute, _ROW_RULES, "a TF1 optimizer's hyperparameter, which it exposes no other way")


_CREATE_NON_SLOT = _use(
    f"{_TRAIN}.optimizer.Optimizer",
    "_create_non_slot_variable",
    _ROW_RULES,
    "makes (once per graph) the beta powers TF1's Adam counts its steps in, so the tables share them",
)
_BETA_ACCUMULATORS = _use(
    f"{_TRAIN}.adam.AdamOptimizer", "_get_beta_accumulators", _ROW_RULES, "Adam's beta powers, read by the tables"
)


def adam_beta_powers(optimizer, colocate_with) -> tuple:
    """(beta1_power, beta2_power) of a TF1 AdamOptimizer, made beside ``colocate_with`` if not made yet."""
    import tensorflow as tf

    with tf.init_scope():  # out of any loop and control dependency, as Adam's own apply_gradients makes them
        for name, initial in (("beta1_power", optimizer._beta1), ("beta2_power", optimizer._beta2)):  # noqa: SLF001
            getattr(optimizer, _CREATE_NON_SLOT)(initial_value=initial, name=name, colocate_with=colocate_with)
    return getattr(optimizer, _BETA_ACCUMULATORS)()


_OPS = "tensorflow.python.framework.ops"
_LOOKUPS = "ps_toolkit/dynamic_embedding/lookups.py"
_UPDATE_INPUT = _use(
    f"{_OPS}.Operation",
    "_update_input",
    _LOOKUPS,
    "a built op's input replaced: the stand-ins a model_fn's lookups returned are fed by the one read of them all",
)
_FLOW_CONTEXT = _use(
    f"{_OPS}.Graph", "_get_control_flow_context", _LOOKUPS, "a lookup joins a batch only in the batch's loop or cond"
)
_CONTROL_INPUTS = _use(
    f"{_OPS}.Graph",
    "_current_control_dependencies",
    _LOOKUPS,
    "a lookup joins a batch only under the control dependencies the batch is read under",
)


def replace_input(op, index: int, tensor) -> None:
    """Makes ``tensor`` the ``index``-th input of the built op ``op``."""
    getattr(op, _UPDATE_INPUT)(index, tensor)


def building_context(graph) -> tuple:
    """(the control-flow context, the control dependencies) that ops made now in ``graph`` get."""
    return getattr(graph, _FLOW_CONTEXT)(), frozenset(getattr(graph, _CONTROL_INPUTS)())


def saveable_classes() -> tuple[type, type]:
    """(SaveableObject, SaveSpec): what tf.compat.v1.train.Saver saves besides variables."""
    from tensorflow.python.training.saving import saveable_object

    return saveable_object.SaveableObject, saveable_object.SaveSpec


def register_shared_resource(handle, create_op, is_initialized) -> None:
    """Registers a resource that the default Scaffold's init_op creates and its ready ops wait for."""
    from tensorflow.python.ops import resources

    resources.register_resource(handle, create_op, is_initialized, is_shared=True)


def optimizer_hyperparameters(optimizer) -> tuple[str, dict] | None:
    """(the optimizer class's name, {hyperparameter: value}) for a TF1 optimizer the tables can apply; else None."""
    for owner, fields in _OPTIMIZER_FIELDS:
        module_name, class_name = owner.rsplit(".", 1)
        cls = getattr(sys.modules.get(module_name), class_name, None)
        if cls is not None and isinstance(optimizer, cls):
            return class_name, {field: getattr(optimizer, attribute) for field, attribute in fields.items()}
    return None


# --- Keras OptimizerV2 training dynamic tables (ps_toolkit/dynamic_embedding/keras_row_rules.py) -------------

_KERAS_RULES = "ps_toolkit/dynamic_embedding/keras_row_rules.py"
_KERAS = "tensorflow.python.keras.optimizer_v2"
_GET_HYPER = _use(
    f"{_KERAS}.optimizer_v2.OptimizerV2",
    "_get_hyper",
    _KERAS_RULES,
    "a hyperparameter as the optimizer's own apply reads it (a number, a variable or a callable)",
)
_DECAYED_LR = _use(
    f"{_KERAS}.optimizer_v2.OptimizerV2",
    "_decayed_lr",
    _KERAS_RULES,
    "the learning rate with the optimizer's decay and schedule at its step, as its apply computes it",
)
# Constructor arguments a Keras optimizer keeps only in private attributes: {attribute: a class that has it}.
_KERAS_SETTINGS = {
    declare(USES, f"{_KERAS}.{module}.{cls}", name, _KERAS_RULES, why, f"{_KERAS}.{module}.{cls}"): None
    for module, cls, name, why in (
        ("gradient_descent", "SGD", "_momentum", "whether SGD keeps a momentum slot"),
        ("rmsprop", "RMSprop", "_momentum", "whether RMSprop keeps a momentum slot"),
        ("adagrad", "Adagrad", "_initial_accumulator_value", "the accumulator slot's initial value"),
        ("ftrl", "Ftrl", "_initial_accumulator_value", "the accumulator slot's initial value"),
        ("ftrl", "Ftrl", "_l2_shrinkage_regularization_strength", "Ftrl's l2 shrinkage, not a hyperparameter"),
    )
}


def keras_hyperparameter(optimizer, name: str, dtype):
    """A Keras OptimizerV2's hyperparameter ``name`` as a tensor of ``dtype``."""
    return getattr(optimizer, _GET_HYPER)(name, dtype)


def keras_decayed_lr(optimizer, dtype):
    """A Keras OptimizerV2's learning rate at its current step (decay and schedule applied)."""
    return getattr(optimizer, _DECAYED_LR)(dtype)


def keras_setting(optimizer, attribute: str, default=None):
    """A constructor argument a Keras OptimizerV2 keeps in the private ``attribute`` (one of _KERAS_SETTINGS)."""
    if attribute not in _KERAS_SETTINGS:
        raise KeyError(f"{attribute} is not a declared Keras optimizer setting")
    return getattr(optimizer, attribute, default)


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
