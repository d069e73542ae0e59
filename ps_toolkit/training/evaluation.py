"""Evaluation through the model_fn's ``eval_metric_ops``: at the end of training, and as the evaluator task.

Both run the model_fn in EVAL mode over the finite dataset of its
``eval_input_fn`` and report every metric (``tf.compat.v1.metrics``), plus
the mean EVAL loss as ``loss`` unless the model names one itself.

The evaluator task needs no server and no connection to the cluster: like
tf.estimator's evaluator, it reads the chief's checkpoints from the shared
checkpoint directory and writes its results as summaries to
``<checkpoint_dir>/eval``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time

import tensorflow as tf

from ps_toolkit.base.errors import ConfigError, RetryableError
from ps_toolkit.cluster.config import ClusterConfig
from ps_toolkit.training.config import TrainConfig
from ps_toolkit.training.model_api import ModeKeys, ModelDefinition, function_name
from ps_toolkit.training.model_calls import call_input_fn, call_model_fn

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class EvalGraph:
    """The ops of one evaluation pass: start the data, reset the metrics, update them per batch, read them."""

    initializer: tf.Operation
    updates: list
    values: dict
    batches: tf.Tensor  # the dataset's cardinality: negative when infinite or unknown

    def run(self, session, max_batches: int | None = None) -> dict:
        """Every metric over the eval dataset (at most ``max_batches`` batches), as floats."""
        session.run(self.initializer)
        if max_batches is None and session.run(self.batches) == tf.data.INFINITE_CARDINALITY:
            raise ConfigError("the eval_input_fn's dataset repeats forever; end it or give --eval_steps")
        done = 0
        while max_batches is None or done < max_batches:
            try:
                session.run(self.updates)
            except tf.errors.OutOfRangeError:
                break
            done += 1
        return {name: float(value) for name, value in session.run(self.values).items()}


def build_eval_graph(definition: ModelDefinition, partitioner=None, reuse=None) -> EvalGraph:
    """The model in EVAL mode on the eval_input_fn's dataset, in the default graph and device scope."""
    name = function_name(definition.eval_input_fn)
    dataset = call_input_fn(definition.eval_input_fn, name, params=definition.params)
    iterator = tf.compat.v1.data.make_initializable_iterator(dataset)
    features, labels = iterator.get_next()
    graph = tf.compat.v1.get_default_graph()
    local_before = set(graph.get_collection(tf.compat.v1.GraphKeys.LOCAL_VARIABLES))
    spec = call_model_fn(definition, features, labels, ModeKeys.EVAL, partitioner=partitioner, reuse=reuse)
    metrics = dict(spec.eval_metric_ops or {})
    if "loss" not in metrics:
        metrics["loss"] = tf.compat.v1.metrics.mean(spec.loss)
    metric_variables = [
        v for v in graph.get_collection(tf.compat.v1.GraphKeys.LOCAL_VARIABLES) if v not in local_before
    ]
    initializer = tf.group(iterator.initializer, tf.compat.v1.variables_initializer(metric_variables))
    return EvalGraph(
        initializer=initializer,
        updates=[update for _, update in metrics.values()],
        values={metric: value for metric, (value, _) in metrics.items()},
        batches=dataset.cardinality(),
    )


class FinalEvaluationHook(tf.compat.v1.train.SessionRunHook):
    """Evaluates the trained model once, when the session ends normally; ``metrics`` holds the result."""

    def __init__(self, eval_graph: EvalGraph, max_batches: int | None = None):
        self._eval_graph = eval_graph
        self._max_batches = max_batches
        self.metrics: dict | None = None

    def end(self, session):
        self.metrics = self._eval_graph.run(session, self._max_batches)


def final_evaluation_hook(definition: ModelDefinition, partitioner=None, max_batches: int | None = None):
    """A FinalEvaluationHook over the model's variables, which must already exist."""
    return FinalEvaluationHook(build_eval_graph(definition, partitioner, reuse=tf.compat.v1.AUTO_REUSE), max_batches)


def evaluate_checkpoints(
    cluster: ClusterConfig,
    config: TrainConfig,
    definition: ModelDefinition,
    partitioner=None,
    *,
    throttle_secs: float = 0.0,
    idle_timeout_secs: float = 600.0,
) -> dict:
    """Evaluates each new checkpoint until one reaches ``config.train_steps``; returns the task's result.

    Raises RetryableError if no new checkpoint appears for ``idle_timeout_secs``.
    """
    if definition.eval_input_fn is None:
        raise ConfigError(f"the evaluator needs an eval_input_fn (--eval_input_fn) for {definition.name}")
    started = time.monotonic()
    records = _evaluate_each_checkpoint(config, definition, partitioner, throttle_secs, idle_timeout_secs)
    last = records[-1]
    metrics = {k: v for k, v in last.items() if k != "global_step"}
    return {
        "job": cluster.task_type,
        "task": cluster.task_index,
        "global_step": last["global_step"],
        "evaluations": len(records),
        "eval": metrics,
        "test_accuracy": metrics.get("accuracy"),
        "test_loss": metrics["loss"],
        "seconds": round(time.monotonic() - started, 3),
    }


def _evaluate_each_checkpoint(
    config: TrainConfig, definition: ModelDefinition, partitioner, throttle_secs: float, idle_timeout_secs: float
) -> list[dict]:
    """Metrics of each new checkpoint, with its global step, up to the one at ``config.train_steps``."""
    records = []
    with tf.Graph().as_default():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        eval_graph = build_eval_graph(definition, partitioner)
        saver = tf.compat.v1.train.Saver()
        writer = tf.compat.v1.summary.FileWriter(os.path.join(config.checkpoint_dir, "eval"))
        with tf.compat.v1.Session() as session:
            for path in tf.compat.v1.train.checkpoints_iterator(
                config.checkpoint_dir, min_interval_secs=throttle_secs, timeout=idle_timeout_secs
            ):
                saver.restore(session, path)
                step = int(session.run(global_step))
                metrics = eval_graph.run(session, config.eval_steps)
                write_summary(writer, step, metrics)
                records.append({"global_step": step, **metrics})
                log.info("evaluated %s: step %d, %s", path, step, _format(metrics))
                if step >= config.train_steps:
                    break
            else:
                raise RetryableError(
                    f"evaluator saw no new checkpoint in {config.checkpoint_dir} for {idle_timeout_secs:.0f}s"
                )
        writer.close()
    return records


def _format(metrics: dict) -> str:
    return ", ".join(f"{name} {value:.4f}" for name, value in metrics.items())


def write_summary(writer, step: int, metrics: dict) -> None:
    """One summary event of every metric at ``step`` (what TensorBoard's eval run shows)."""
    summary = tf.compat.v1.Summary(
        value=[tf.compat.v1.Summary.Value(tag=name, simple_value=value) for name, value in metrics.items()]
    )
    writer.add_summary(summary, step)
    writer.flush()
