"""A sync chief's aggregation thread has ended before its session closes: nothing is left in flight at the end.

Past the last step no replica pushes a gradient again; an aggregation started
then waits on the accumulators until the session's close cancels it, and that
close then waits for the cancelled step's cleanup on every ps (7-18 s with an
embedding table partitioned over two ps). Checked by state, not by time: the
coordinator names the threads it had to leave running, and none may be left.
"""

import logging
import threading

import pytest
import tensorflow as tf

import ps_toolkit
from ps_toolkit.launch.local_cluster import InProcessCluster
from ps_toolkit.task.roles import trainer
from ps_toolkit.training.config import TrainConfig
from ps_toolkit.training.model_api import ModelDefinition

VOCAB, DIM, IDS = 1000, 4, 5


def _input_fn(input_context):
    ids = tf.random.stateless_uniform([64, IDS], seed=[1, 2], maxval=VOCAB, dtype=tf.int64)
    labels = tf.cast(tf.reduce_sum(ids, axis=1) % 2, tf.int64)
    return tf.data.Dataset.from_tensor_slices(({"ids": ids}, labels)).repeat().batch(16)


def _model_fn(features, labels, mode):
    table = tf.compat.v1.get_variable(
        "table", [VOCAB, DIM], partitioner=tf.compat.v1.fixed_size_partitioner(2)
    )  # partitioned over both ps: the aggregation spans them
    rows = tf.reduce_mean(tf.nn.embedding_lookup(table, features["ids"]), axis=1)
    weights = tf.compat.v1.get_variable("logit_w", [DIM, 1])
    logits = tf.squeeze(tf.matmul(rows, weights), axis=1)
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.cast(labels, tf.float32), logits=logits))
    return ps_toolkit.ModelSpec(mode, loss=loss)


class _Messages(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.mark.parametrize("steps_per_run", [1, 20])
def test_sync_chief_leaves_no_aggregation_running_at_close(tmp_path, steps_per_run):
    config = TrainConfig(
        train_steps=30, steps_per_run=steps_per_run, batch_size=16, sync_replicas=True, checkpoint_dir=str(tmp_path)
    )
    definition = ModelDefinition(_model_fn, _input_fn, name="partitioned")
    messages = _Messages()
    logger = logging.getLogger("tensorflow")
    level = logger.level
    logger.setLevel(logging.INFO)  # the coordinator says so at INFO
    logger.addHandler(messages)
    try:
        with InProcessCluster(num_ps=2, num_workers=1) as cluster:
            result = trainer.train(
                cluster.cluster_config("worker", 0), cluster.targets["worker"][0], config, definition
            )
            left = [t.name for t in threading.enumerate() if t.name.startswith("QueueRunnerThread-")]
    finally:
        logger.removeHandler(messages)
        logger.setLevel(level)
    assert result["global_step"] == 30
    assert not [line for line in messages.lines if "threads still running" in line], messages.lines[-5:]
    assert not left
