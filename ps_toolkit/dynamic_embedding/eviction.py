"""Eviction, on each shard's ps: ids not seen for a number of global steps, then the least recently seen.

Design: docs/design.md, "Dynamic embedding tables".
"""

from __future__ import annotations

import tensorflow as tf

from ps_toolkit.dynamic_embedding.apply import count_stat
from ps_toolkit.dynamic_embedding.hash_tables import on_device
from ps_toolkit.dynamic_embedding.table import STAT_EVICTED, DynamicTable, TableShard


def evicts(table: DynamicTable) -> bool:
    """Whether the table has an eviction policy."""
    return table.evict_after_steps is not None or table.max_rows_per_shard is not None


def eviction_op(table: DynamicTable, global_step) -> tf.Operation:
    """The op evicting from every shard of ``table`` as of ``global_step``."""
    step = tf.cast(tf.convert_to_tensor(global_step), tf.int64)
    return tf.group(*[evict_shard(shard, step) for shard in table.shards])


def evict_shard(shard: TableShard, step: tf.Tensor) -> tf.Operation:
    table = shard.table
    with on_device(shard.device), tf.name_scope("evict_" + shard.prefix.split("/")[-1]):
        ids, meta = shard.meta.export()
        last_seen = meta[:, 1]
        evicted = tf.zeros_like(last_seen, tf.bool)
        if table.evict_after_steps is not None:
            evicted = last_seen < step - table.evict_after_steps
        if table.max_rows_per_shard is not None:
            kept_last_seen = tf.where(evicted, tf.int64.max, last_seen)
            excess = tf.maximum(tf.size(ids) - tf.reduce_sum(tf.cast(evicted, tf.int32)) - table.max_rows_per_shard, 0)
            # The ``excess`` least recently seen of those kept: the largest negated last-seen steps.
            _, oldest = tf.math.top_k(-kept_last_seen, k=excess)
            evicted = tf.logical_or(
                evicted, tf.scatter_nd(oldest[:, None], tf.ones_like(oldest, tf.bool), tf.shape(ids))
            )
        gone = tf.boolean_mask(ids, evicted)
        rows_gone = tf.reduce_sum(tf.cast(tf.logical_and(evicted, meta[:, 0] >= table.admit_after), tf.int64))
        removals = [shard.rows.remove(gone), shard.meta.remove(gone)]
        removals += [slot.remove(gone) for slot in shard.slots.values()]
        with tf.control_dependencies(removals):
            return count_stat(shard, STAT_EVICTED, rows_gone)
