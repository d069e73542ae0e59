"""Applying a step's row gradients: summed per id on the worker, split by shard, updated on each shard's ps.

On the shard's ps, for the ids of the step: their seen-count grows by how
often the batch held them and their last-seen step becomes the global step;
an id whose count reaches the table's admission threshold is admitted (its
row starts from the initial row); admitted ids get the optimizer's update of
their row and slots, the others no row at all.
"""

from __future__ import annotations

import tensorflow as tf

from ps_toolkit.dynamic_embedding import keys
from ps_toolkit.dynamic_embedding.hash_tables import on_device
from ps_toolkit.dynamic_embedding.lookups import LookupRecord
from ps_toolkit.dynamic_embedding.row_rules import RowRule
from ps_toolkit.dynamic_embedding.table import STAT_ADMITTED, DynamicTable, TableShard


def summed_gradient(gradient, num_rows: tf.Tensor) -> tf.Tensor:
    """A lookup's gradient with respect to its unique rows, as a dense [unique, dim] sum per id."""
    if isinstance(gradient, tf.IndexedSlices):
        return tf.math.unsorted_segment_sum(gradient.values, gradient.indices, num_rows)
    return tf.convert_to_tensor(gradient)


def merged(records_and_grads: list[tuple[LookupRecord, tf.Tensor]]) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """(unique ids, summed gradients, counts) of one table's lookups in one step, merged by id."""
    if len(records_and_grads) == 1:
        record, grads = records_and_grads[0]
        return record.unique_ids, grads, record.counts
    ids = tf.concat([record.unique_ids for record, _ in records_and_grads], 0)
    grads = tf.concat([grads for _, grads in records_and_grads], 0)
    counts = tf.concat([record.counts for record, _ in records_and_grads], 0)
    unique_ids, index = tf.unique(ids, out_idx=tf.int32)
    num = tf.size(unique_ids)
    return (
        unique_ids,
        tf.math.unsorted_segment_sum(grads, index, num),
        tf.math.unsorted_segment_sum(counts, index, num),
    )


def apply_table(table: DynamicTable, rule: RowRule, ids, grads, counts, global_step) -> tf.Operation:
    """The update of ``table`` for one step's unique ``ids``, their summed ``grads`` and ``counts``."""
    step = tf.cast(tf.convert_to_tensor(global_step), tf.int64) if global_step is not None else tf.constant(0, tf.int64)
    counts = tf.cast(counts, tf.int64)
    if table.num_shards == 1:
        return apply_shard(table.shards[0], rule, ids, grads, counts, step)
    shard = keys.shard_of(ids, table.num_shards)
    parts = zip(
        tf.dynamic_partition(ids, shard, table.num_shards),
        tf.dynamic_partition(grads, shard, table.num_shards),
        tf.dynamic_partition(counts, shard, table.num_shards),
        strict=True,
    )
    return tf.group(*[apply_shard(s, rule, *part, step) for s, part in zip(table.shards, parts, strict=True)])


def apply_shard(shard: TableShard, rule: RowRule, ids, grads, counts, step) -> tf.Operation:
    """On the shard's ps: count the ids, admit those due, update the rows and slots of the admitted."""
    table = shard.table
    slot_tables = {name: shard.slot(name) for name in rule.slots}
    grads = tf.convert_to_tensor(grads)
    # After the gradient, so after the step's lookups: the meta written below does not depend on the gradient,
    # and a lookup reading it first would see an id counted but without its row.
    with (
        on_device(shard.device),
        tf.name_scope("apply_" + shard.prefix.split("/")[-1]),
        tf.control_dependencies([grads]),
    ):
        old_count = shard.meta.find(ids)[:, 0]
        new_count = old_count + counts
        existed = old_count >= table.admit_after
        admitted = new_count >= table.admit_after
        rows = tf.where(existed[:, None], shard.rows.find(ids), table.initial_rows(ids))
        slots = {
            name: tf.where(existed[:, None], slot_tables[name].find(ids), tf.cast(initial, table.value_dtype))
            for name, initial in rule.slots.items()
        }
        new_rows, new_slots = rule.update(rows, slots, tf.cast(grads, table.value_dtype), step)
        kept_ids = tf.boolean_mask(ids, admitted)
        updates = [shard.rows.insert(kept_ids, tf.boolean_mask(new_rows, admitted))]
        updates += [slot_tables[n].insert(kept_ids, tf.boolean_mask(v, admitted)) for n, v in new_slots.items()]
        # The meta last: a lookup on another worker meanwhile sees an id admitted only once its row is there.
        with tf.control_dependencies(updates):
            updates.append(shard.meta.insert(ids, tf.stack([new_count, tf.fill(tf.shape(ids), step)], 1)))
        newly = tf.reduce_sum(tf.cast(tf.logical_and(admitted, tf.logical_not(existed)), tf.int64))
        updates.append(count_stat(shard, STAT_ADMITTED, newly))
        return tf.group(*updates)


def count_stat(shard: TableShard, which: int, amount: tf.Tensor) -> tf.Operation:
    """Adds ``amount`` to the shard's counter ``which`` (on its ps)."""
    key = tf.constant([which], tf.int64)
    return shard.stats.insert(key, shard.stats.find(key) + amount)
