"""A replica's training batches from its input_fn: one iterator on the worker, a batch per step."""

from __future__ import annotations

import tensorflow as tf

from ps_toolkit.cluster.config import ClusterConfig
from ps_toolkit.training import folder_input
from ps_toolkit.training.config import TrainConfig
from ps_toolkit.training.model_api import InputContext, ModelDefinition, function_name
from ps_toolkit.training.model_calls import call_input_fn


class IteratorInitHook(tf.compat.v1.train.SessionRunHook):
    """Initializes a dataset iterator each time a session is (re)created."""

    def __init__(self, initializer):
        self._initializer = initializer

    def after_create_session(self, session, coord):
        session.run(self._initializer)


def input_context(cluster: ClusterConfig, config: TrainConfig) -> InputContext:
    """What this replica's input_fn is told: the number of replicas, its index, its batch size."""
    return InputContext(
        num_input_pipelines=cluster.num_replicas,
        input_pipeline_id=cluster.replica_index,
        global_batch_size=config.batch_size,
    )


def train_batches(cluster: ClusterConfig, config: TrainConfig, definition: ModelDefinition):
    """(next_batch, init hook): ``next_batch()`` builds a get-next op and returns (features, labels).

    Call it where the batch is used: inside an in-graph loop's body each
    iteration then takes a new batch; a batch tensor made outside the loop
    would enter it as a constant, and every step of a run would train on one batch.
    """
    with tf.compat.v1.device(cluster.device):
        dataset = call_input_fn(
            definition.input_fn,
            function_name(definition.input_fn),
            input_context(cluster, config),
            definition.params,
        )
        if tf.compat.v1.get_collection(folder_input.FOLDER_INPUTS):
            dataset = dataset.with_options(folder_input.exact_position_options())
        iterator = tf.compat.v1.data.make_initializable_iterator(dataset)

    def next_batch():
        with tf.compat.v1.device(cluster.device):
            return iterator.get_next()

    return next_batch, IteratorInitHook(iterator.initializer)
