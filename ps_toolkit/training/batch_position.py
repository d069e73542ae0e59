"""Batch indices that resume where the checkpoint left them: a replica's count of batches taken, saved with the model.

    def input_fn(context):
        return ps_toolkit.batch_indices(context).map(make_batch)

For inputs that make batch ``i`` from its index alone (generated data, a
deterministic read of a fixed set): ``batch_indices`` is the dataset
``start, start + 1, ...`` where ``start`` is this replica's saved position,
read each time the input's iterator is initialized. The trainer adds one to
the position in the step that takes a batch, so the checkpoint holds the
batches each replica trained into the model. A restore (the chief's restart
from a checkpoint, a ps restart) sets the position back with the model: each
replica goes on at the first batch the restored model has not trained on. The
batches taken after that checkpoint are taken again, once: their updates went
with the state the restore replaced (at most one checkpoint interval).
"""

from __future__ import annotations

import tensorflow as tf

from ps_toolkit.training.model_api import InputContext

# Graph collection of the BatchPositions built in a graph: the trainer counts each batch taken.
BATCH_POSITIONS = "ps_toolkit_batch_positions"
END = 2**62  # the last index: endless for any training run


class BatchPosition:
    """The position variables of one ``batch_indices`` (one int64 per replica, all saved) and this replica's."""

    def __init__(self, num_replicas: int, replica: int, name: str):
        step = tf.compat.v1.train.get_global_step()
        # Beside the global step, on a ps: saved in the chief's checkpoint, restored with the model.
        with tf.compat.v1.device(step.device if step is not None else None), tf.compat.v1.variable_scope(name):
            self.variables = [
                tf.compat.v1.get_variable(
                    f"position_replica_{index}",
                    shape=[],
                    dtype=tf.int64,
                    initializer=tf.zeros_initializer(),
                    trainable=False,
                    use_resource=True,
                )
                for index in range(num_replicas)
            ]
        self.mine = self.variables[replica]

    def dataset(self) -> tf.data.Dataset:
        """The indices from this replica's position (read when the iterator is initialized) on."""
        return tf.data.Dataset.range(self.mine.read_value(), END)

    def taken(self):
        """The op adding one batch to this replica's position."""
        return self.mine.assign_add(1, read_value=False)


def batch_indices(context: InputContext, *, name: str = "batch_position") -> tf.data.Dataset:
    """This replica's batch indices (int64), endless, from the first one the restored model has not trained on.

    Args:
        context: The input_fn's InputContext: the number of replicas and this one's index.
        name: The position variables' scope; one per ``batch_indices`` of a graph.
    """
    position = BatchPosition(context.num_input_pipelines, context.input_pipeline_id, name)
    tf.compat.v1.add_to_collection(BATCH_POSITIONS, position)
    return position.dataset()


def counted(batch):
    """``batch`` (a get-next's nest of tensors), each batch position of the graph advanced when it is taken."""
    positions = tf.compat.v1.get_collection(BATCH_POSITIONS)
    if not positions:
        return batch
    with tf.control_dependencies(tf.nest.flatten(batch)):  # counted once the batch is there, never at the end
        taken = [position.taken() for position in positions]
    with tf.control_dependencies(taken):
        return tf.nest.map_structure(tf.identity, batch)
