"""The evaluator loop: evaluates each new checkpoint of the chief until training's last step.

The evaluator task needs no server and no connection to the cluster: like
tf.estimator's evaluator, it reads the chief's checkpoints from the shared
checkpoint directory and writes its results as summaries to
``<checkpoint_dir>/eval``.
"""

from __future__ import annotations

import logging
import os
import time

import tensorflow as tf

from ps_toolkit import dynamic_embedding
from ps_toolkit.base.errors import ConfigError, RetryableError
from ps_toolkit.cluster.config import ClusterConfig
from ps_toolkit.training.config import TrainConfig
from ps_toolkit.training.evaluation import build_eval_graph, write_summary
from ps_toolkit.training.model_api import ModelDefinition

log = logging.getLogger(__name__)


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
        saver = dynamic_embedding.DeltaMergingSaver()  # a checkpoint's newest delta merged in
        writer = tf.compat.v1.summary.FileWriter(os.path.join(config.checkpoint_dir, "eval"))
        with tf.compat.v1.Session() as session:
            for path in tf.compat.v1.train.checkpoints_iterator(
                config.checkpoint_dir, min_interval_secs=throttle_secs, timeout=idle_timeout_secs
            ):
                saver.restore(session, path)
                step = int(session.run(global_step))
                metrics = eval_graph.run(session, config.eval_steps, config.watchdog_secs or None)
                write_summary(writer, step, metrics)
                records.append({"global_step": step, **metrics})
                log.info("evaluated %s: step %d, %s", path, step, _format(metrics))
                if step >= config.last_step:
                    break
            else:
                raise RetryableError(
                    f"evaluator saw no new checkpoint in {config.checkpoint_dir} for {idle_timeout_secs:.0f}s"
                )
        writer.close()
    return records


def _format(metrics: dict) -> str:
    return ", ".join(f"{name} {value:.4f}" for name, value in metrics.items())
