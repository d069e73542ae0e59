"""The evaluator task: evaluates every new checkpoint on the test set until training ends.

It needs no server and no connection to the cluster: like tf.estimator's
evaluator, it reads the chief's checkpoints from the shared checkpoint
directory, and writes its results as summaries to ``<checkpoint_dir>/eval``.
"""

from __future__ import annotations

import logging
import os
import time

import tensorflow as tf

from ps_toolkit import placement
from ps_toolkit.cluster import ClusterConfig
from ps_toolkit.data import DataSplits
from ps_toolkit.errors import RetryableError
from ps_toolkit.models import build_model
from ps_toolkit.train_config import TrainConfig

log = logging.getLogger(__name__)


def _evaluation_graph(cluster: ClusterConfig, config: TrainConfig, data: DataSplits):
    images = tf.compat.v1.placeholder(tf.float32, [None, data.test_images.shape[1]], name="images")
    labels = tf.compat.v1.placeholder(tf.int64, [None], name="labels")
    global_step = tf.compat.v1.train.get_or_create_global_step()
    # The same partitioning as training, so every saved variable has a home.
    partitioner = placement.variable_partitioner(cluster) if config.partition_variables else None
    with tf.compat.v1.variable_scope("model"):
        logits = build_model(config.model, images, partitioner)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, 1), labels), tf.float32))
    return images, labels, global_step, loss, correct


def evaluate_checkpoints(
    cluster: ClusterConfig,
    config: TrainConfig,
    data: DataSplits,
    *,
    throttle_secs: float = 0.0,
    idle_timeout_secs: float = 600.0,
    eval_batch_size: int = 1000,
) -> dict:
    """Evaluates each new checkpoint until one reaches ``config.train_steps``.

    Raises RetryableError if no new checkpoint appears for ``idle_timeout_secs``.
    """
    started = time.monotonic()
    records = []
    with tf.Graph().as_default():
        images, labels, global_step, loss, correct = _evaluation_graph(cluster, config, data)
        saver = tf.compat.v1.train.Saver()
        writer = tf.compat.v1.summary.FileWriter(os.path.join(config.checkpoint_dir, "eval"))
        with tf.compat.v1.Session() as session:
            for path in tf.compat.v1.train.checkpoints_iterator(
                config.checkpoint_dir, min_interval_secs=throttle_secs, timeout=idle_timeout_secs
            ):
                saver.restore(session, path)
                step = int(session.run(global_step))
                metrics = _evaluate(session, images, labels, loss, correct, data, eval_batch_size)
                _write_summary(writer, step, metrics)
                records.append({"global_step": step, **metrics})
                log.info("evaluated %s: step %d, accuracy %.4f, loss %.4f", path, step, *metrics.values())
                if step >= config.train_steps:
                    break
            else:
                raise RetryableError(
                    f"evaluator saw no new checkpoint in {config.checkpoint_dir} for {idle_timeout_secs:.0f}s"
                )
        writer.close()
    last = records[-1]
    return {
        "job": cluster.task_type,
        "task": cluster.task_index,
        "global_step": last["global_step"],
        "evaluations": len(records),
        "test_accuracy": last["accuracy"],
        "test_loss": last["loss"],
        "seconds": round(time.monotonic() - started, 3),
    }


def _evaluate(session, images, labels, loss, correct, data: DataSplits, batch_size: int) -> dict:
    total_loss, total_correct, count = 0.0, 0.0, len(data.test_images)
    for start in range(0, count, batch_size):
        feed = {
            images: data.test_images[start : start + batch_size],
            labels: data.test_labels[start : start + batch_size],
        }
        batch_loss, batch_correct = session.run([loss, correct], feed_dict=feed)
        total_loss += float(batch_loss) * len(feed[images])
        total_correct += float(batch_correct)
    return {"accuracy": total_correct / count, "loss": total_loss / count}


def _write_summary(writer, step: int, metrics: dict) -> None:
    summary = tf.compat.v1.Summary(
        value=[tf.compat.v1.Summary.Value(tag=name, simple_value=value) for name, value in metrics.items()]
    )
    writer.add_summary(summary, step)
    writer.flush()
