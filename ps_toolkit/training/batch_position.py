"""Batch indices that go on after a restore: each input starts at the global step it finds.

    def input_fn(context):
        return ps_toolkit.batch_indices(context).map(make_batch)

For inputs that make batch ``i`` from ``i`` alone (generated data seeded by
the index and the replica): ``batch_indices`` is the dataset ``s, s + 1, ...``
where ``s`` is the global step when the input's iterator is initialized (at
each session the replica makes). A replica takes one batch a step and every
step adds one to the global step (async, sync and the in-graph loop alike), so
the indices a replica took before a checkpoint are all below that
checkpoint's global step: a restore (a ps restart) sets the step back, each
replica starts again at the restored step, and no batch the restored model
trained on is read again. Indices taken after the checkpoint can be read
again, once (their updates went with the rollback: at most one checkpoint
interval). Nothing is added to the checkpoint, so a checkpoint made with
another input or another number of replicas restores as it did.
"""

from __future__ import annotations

import tensorflow as tf

from ps_toolkit.training.model_api import InputContext

END = 2**62  # the last index: endless for any training run


def batch_indices(context: InputContext) -> tf.data.Dataset:
    """This replica's batch indices (int64), endless, from the global step when its iterator is initialized.

    Args:
        context: The input_fn's InputContext (its replica seeds the batches, not the indices).
    """
    del context  # every replica counts from the global step; the replica index tells their batches apart
    step = tf.compat.v1.train.get_global_step()
    start = tf.constant(0, tf.int64) if step is None else tf.cast(tf.identity(step), tf.int64)
    return tf.data.Dataset.range(start, END)
