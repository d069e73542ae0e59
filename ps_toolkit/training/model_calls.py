"""Calling a user's model_fn and input_fns, and checking what they return (one line naming the problem).

Every caller (the training graph, the final evaluation, the evaluator task,
the export, the pre-start check) goes through these, so a model is built the
same way everywhere: under variable scope ``MODEL_SCOPE``, which is what the
checkpoints hold.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import traceback

import tensorflow as tf

from ps_toolkit.base.errors import ConfigError, ToolkitError
from ps_toolkit.base.progress_lines import LOG_ONLY_PREFIX
from ps_toolkit.dynamic_embedding.lookup_batches import batched_lookups
from ps_toolkit.training.model_api import InputContext, ModeKeys, ModelDefinition, ModelSpec

MODEL_SCOPE = "model"
# Collections whose entries, made by a model_fn called inside a loop body, can only run there.
_LOOP_BODY_COLLECTIONS = (tf.compat.v1.GraphKeys.SUMMARIES, tf.compat.v1.GraphKeys.UPDATE_OPS)


def call_model_fn(
    definition: ModelDefinition,
    features,
    labels,
    mode: str,
    *,
    partitioner=None,
    reuse=None,
    custom_getter=None,
    inner: bool = False,
) -> ModelSpec:
    """The model_fn's checked ModelSpec, built under ``MODEL_SCOPE``.

    ``inner``: a call whose ops run only inside the training step (an in-graph
    loop's body): its update ops run with the loss, and neither they nor its
    summaries stay in the graph's collections, where fetches from outside the
    loop would find them.
    """
    added = {}
    with _new_entries_removed(_LOOP_BODY_COLLECTIONS, added) if inner else contextlib.nullcontext():
        with (
            tf.compat.v1.variable_scope(MODEL_SCOPE, reuse=reuse, custom_getter=custom_getter, partitioner=partitioner),
            # A dynamic table per feature costs what one shared table does: each ps gets one read for them all.
            batched_lookups(),
            user_code_errors(definition.name),
        ):
            result = _call_with_accepted_args(
                definition.model_fn,
                definition.name,
                features=features,
                labels=labels,
                mode=mode,
                params=dict(definition.params),
            )
        spec = ModelSpec.from_model_fn_result(result, mode, definition.name)
        check_spec(spec, mode, definition.name)
    update_ops = added.get(tf.compat.v1.GraphKeys.UPDATE_OPS)
    if update_ops:
        with tf.control_dependencies(update_ops):
            spec = ModelSpec(**{**spec.__dict__, "loss": tf.identity(spec.loss)})
    return spec


@contextlib.contextmanager
def user_code_errors(name: str):
    """An exception a user's function raises becomes one line (ConfigError, status 2) naming the function;
    its traceback goes to this task's stderr, its log, on lines the launcher keeps off the console."""
    try:
        yield
    except ToolkitError:
        raise
    except Exception as err:  # noqa: BLE001 - whatever the user's code raised is the user's error
        lines = "".join(traceback.format_exception(err)).splitlines()
        sys.stderr.write("".join(f"{LOG_ONLY_PREFIX}{line}\n" for line in lines))
        sys.stderr.flush()
        detail = str(err).strip().splitlines()
        said = f"{type(err).__name__}: {detail[0][:300]}" if detail else type(err).__name__
        raise ConfigError(f"{name} raised {said} (the traceback is in this task's log)") from None


@contextlib.contextmanager
def _new_entries_removed(keys, added: dict):
    graph = tf.compat.v1.get_default_graph()
    before = {key: list(graph.get_collection(key)) for key in keys}
    try:
        yield
    finally:
        for key in keys:
            collection = graph.get_collection_ref(key)
            known = {id(entry) for entry in before[key]}
            added[key] = [entry for entry in collection if id(entry) not in known]
            collection[:] = before[key]


def _call_with_accepted_args(function, name: str, **arguments):
    """Calls ``function`` with the arguments its signature names (as tf.estimator calls a model_fn)."""
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return function(*arguments.values())
    if any(p.kind == p.VAR_KEYWORD for p in parameters.values()):
        return function(**arguments)
    accepted = {key: value for key, value in arguments.items() if key in parameters}
    missing = [p for p in parameters.values() if p.default is p.empty and p.name not in accepted]
    if missing and all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters.values()):
        # Positional parameters with other names: pass in the contract's order.
        return function(*list(arguments.values())[: len(parameters)])
    return function(**accepted)


def check_spec(spec: ModelSpec, mode: str, name: str) -> None:
    """ConfigError naming the first thing ``spec`` lacks for ``mode``."""
    if mode in (ModeKeys.TRAIN, ModeKeys.EVAL):
        if spec.loss is None:
            raise ConfigError(f"{name} returned no loss in {mode.upper()} mode (ModelSpec(loss=...))")
        if not tf.is_tensor(spec.loss) or not spec.loss.dtype.is_floating:
            raise ConfigError(f"{name} returned a loss that is not a float tensor: {spec.loss!r}")
        if spec.loss.shape.rank not in (0, None):
            raise ConfigError(f"{name} returned a loss of shape {spec.loss.shape}; it must be a scalar")
    if mode == ModeKeys.PREDICT and spec.predictions is None and not spec.export_outputs:
        raise ConfigError(f"{name} returned no predictions in PREDICT mode (ModelSpec(predictions=...))")
    for metric, pair in (spec.eval_metric_ops or {}).items():
        if not (isinstance(pair, tuple | list) and len(pair) == 2):
            raise ConfigError(f"{name}: eval_metric_ops[{metric!r}] is not a (value, update_op) pair")


def call_input_fn(input_fn, name: str, input_context: InputContext | None = None, params=None) -> tf.data.Dataset:
    """The input_fn's dataset, checked to yield ``(features, labels)``.

    A training input_fn gets ``input_context`` (as its first argument, or by
    that name); any input_fn with a ``params`` argument gets the model's params.
    """
    try:
        parameters = inspect.signature(input_fn).parameters
    except (TypeError, ValueError):
        parameters = {}
    args, kwargs = [], {}
    if "params" in parameters:
        kwargs["params"] = dict(params or {})
    if "input_context" in parameters:
        kwargs["input_context"] = input_context
    elif input_context is not None and any(
        p.name != "params" and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters.values()
    ):
        args.append(input_context)
    with user_code_errors(name):
        dataset = input_fn(*args, **kwargs)
    if not isinstance(dataset, tf.data.Dataset):
        raise ConfigError(f"{name} returned {type(dataset).__name__}, not a tf.data.Dataset of (features, labels)")
    spec = dataset.element_spec
    if not (isinstance(spec, tuple) and len(spec) == 2):
        raise ConfigError(f"{name} yields {_describe(spec)}; expected (features, labels)")
    features = spec[0]
    if not (isinstance(features, tf.TensorSpec) or (isinstance(features, dict) and features)):
        raise ConfigError(f"{name} yields features {_describe(features)}; expected a tensor or a dict of tensors")
    return dataset


def _describe(spec) -> str:
    if isinstance(spec, tuple):
        return f"a tuple of {len(spec)} ({', '.join(_describe(s) for s in spec)})"
    if isinstance(spec, dict):
        return "{" + ", ".join(f"{k!r}: {_describe(v)}" for k, v in spec.items()) + "}"
    if isinstance(spec, tf.TensorSpec):
        return f"{spec.dtype.name}{spec.shape}"
    return type(spec).__name__
