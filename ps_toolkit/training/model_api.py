"""The training seam's contract: ``model_fn``, ``input_fn`` and what they return.

Design: docs/design.md, "The training seam and the public API".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from ps_toolkit.base.errors import ConfigError


class ModeKeys:
    """The three modes a model_fn is called in (the string values of tf.estimator.ModeKeys)."""

    TRAIN = "train"
    EVAL = "eval"
    PREDICT = "infer"


MODES = (ModeKeys.TRAIN, ModeKeys.EVAL, ModeKeys.PREDICT)


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """What a model_fn returns, in the shape of tf.estimator.EstimatorSpec.

    Attributes:
        mode: the mode the model_fn was called in.
        loss: scalar float tensor; required in TRAIN and EVAL mode.
        predictions: a tensor or a dict of tensors; what the export serves.
        eval_metric_ops: name -> (value tensor, update op), e.g. from ``tf.compat.v1.metrics``.
        export_outputs: signature name -> a dict of tensors (or an object with ``.outputs``,
            as tf.estimator's PredictOutput); default: ``predictions`` as ``serving_default``.
        train_op: the model's own training op; when given, the toolkit runs it as it is and
            builds no optimizer step (it must increment the global step).
        training_hooks: SessionRunHooks to run during training.
    """

    mode: str
    loss: Any = None
    predictions: Any = None
    eval_metric_ops: Mapping | None = None
    export_outputs: Mapping | None = None
    train_op: Any = None
    training_hooks: tuple = ()

    def __post_init__(self):
        if self.mode not in MODES:
            raise ConfigError(f"ModelSpec mode {self.mode!r} is not one of {', '.join(MODES)}")
        object.__setattr__(self, "training_hooks", tuple(self.training_hooks or ()))

    @classmethod
    def from_model_fn_result(cls, result, mode: str, source: str) -> ModelSpec:
        """A ModelSpec from what ``source`` returned: a ModelSpec or an object with EstimatorSpec's fields.

        Args:
            result: What the model_fn returned.
            mode: The mode it was called in, for a result that names none.
            source: How messages name the model_fn (``MODULE:FUNCTION``).

        Returns:
            ``result`` itself if it is a ModelSpec, else a ModelSpec of its fields.

        Raises:
            ConfigError: ``result`` is neither.
        """
        if isinstance(result, cls):
            return result
        if result is None or not hasattr(result, "loss"):
            raise ConfigError(f"{source} returned {type(result).__name__}, not a ps_toolkit.ModelSpec")
        fields = ("loss", "predictions", "eval_metric_ops", "export_outputs", "train_op", "training_hooks")
        return cls(mode=getattr(result, "mode", mode) or mode, **{f: getattr(result, f, None) for f in fields})


@dataclasses.dataclass(frozen=True)
class InputContext:
    """What an input_fn is told about its replica, as ``tf.distribute.InputContext`` tells it.

    Attributes:
        num_input_pipelines: The number of training replicas.
        input_pipeline_id: This replica's index (the chief is 0): shard or seed by it so
            that no two replicas read the same batches.
        global_batch_size: ``--batch_size``.
        num_replicas_in_sync: Replicas that split one batch: 1 (between-graph replicas
            each take a whole batch).
    """

    num_input_pipelines: int
    input_pipeline_id: int
    global_batch_size: int
    num_replicas_in_sync: int = 1

    def get_per_replica_batch_size(self, global_batch_size: int | None = None) -> int:
        """The batch each replica takes; between-graph replicas each take the whole configured batch.

        Args:
            global_batch_size: A batch size to split instead of the configured one.

        Returns:
            The per-replica batch size.
        """
        return self.global_batch_size if global_batch_size is None else global_batch_size // self.num_replicas_in_sync


@dataclasses.dataclass(frozen=True)
class ModelDefinition:
    """A model and its data, as the toolkit trains it: the functions of the contract above and their params.

    Attributes:
        model_fn: ``model_fn(features, labels, mode, params) -> ModelSpec``.
        input_fn: ``input_fn(input_context) -> tf.data.Dataset`` of (features, labels).
        eval_input_fn: ``eval_input_fn() -> tf.data.Dataset``, finite; None for no evaluation.
        params: Passed to ``model_fn`` (and to an input_fn with a ``params`` argument).
        name: How messages name the model (a built-in's name, or ``MODULE:FUNCTION``).
        default_learning_rates: Optimizer name -> the learning rate this model trains
            well with, used when none is given.
    """

    model_fn: Callable
    input_fn: Callable
    eval_input_fn: Callable | None = None
    params: Mapping = dataclasses.field(default_factory=dict)
    name: str = "model_fn"  # how messages name the model (a built-in's name, or MODULE:FUNCTION)
    # Optimizer name -> the learning rate this model trains well with, when none is given.
    default_learning_rates: Mapping = dataclasses.field(default_factory=dict)


def function_name(function) -> str:
    """``module:function`` of a user's function (of the function a functools.partial wraps).

    Args:
        function: A function, or a ``functools.partial`` of one.

    Returns:
        Its ``module:qualname``, with ``?`` for what it lacks.
    """
    function = getattr(function, "func", function)
    return f"{getattr(function, '__module__', '?')}:{getattr(function, '__qualname__', repr(function))}"
