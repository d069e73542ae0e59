"""Applying a step's row gradients: summed per id on the worker, one update per group shard on its ps.

The gradients of every table of a group bound for one ps are concatenated and
applied there together: the group's hash tables are each read once and
written once per step, whatever the number of tables. On the ps, for the ids
of the step: their seen-count grows by how often the batch held them and
their last-seen step becomes the global step; an id whose count reaches the
group's admission threshold is admitted (its row starts from the initial
row); admitted ids get the optimizer's update of their row and slots, the
others no row at all.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from ps_toolkit.dynamic_embedding import initial_rows, keys
from ps_toolkit.dynamic_embedding.hash_tables import on_device
from ps_toolkit.dynamic_embedding.layout import STAT_ADMITTED, GroupShard
from ps_toolkit.dynamic_embedding.lookups import LookupRecord
from ps_toolkit.dynamic_embedding.row_rules import RowRule


@dataclasses.dataclass
class ShardUpdate:
    """The rows one step updates on one group shard: stored keys, hashes, gradients, counts, table indices."""

    stored: list = dataclasses.field(default_factory=list)
    ids: list = dataclasses.field(default_factory=list)
    hashes: list = dataclasses.field(default_factory=list)
    grads: list = dataclasses.field(default_factory=list)
    counts: list = dataclasses.field(default_factory=list)
    table_index: list = dataclasses.field(default_factory=list)

    def add(self, table, ids, hashes, grads, counts) -> None:
        """Adds one table's distinct ids bound for this shard."""
        table_index = tf.fill(tf.shape(hashes), table.group.tables.index(table))
        self.add_ids(table.group.key, table.tag, ids, hashes, grads, counts, table_index)

    def add_ids(self, key, tags, ids, hashes, grads, counts, table_index) -> None:
        """Adds ids of the group's tables (``tags``: each id's table tag, or one for all) bound for this shard."""
        self.stored.append(keys.stored_keys(key.key_dtype, tags, ids, hashes))
        self.ids.append(ids)
        self.hashes.append(hashes)
        self.grads.append(tf.cast(grads, key.value_dtype))
        self.counts.append(tf.cast(counts, tf.int64))
        self.table_index.append(table_index)


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


def add_group(updates: dict, group, table_steps: list) -> None:
    """Splits the step of a group's tables by shard into ``updates``: one hashing and one split for them all.

    Args:
        updates: GroupShard -> ShardUpdate, filled here.
        group: The tables' TableGroup.
        table_steps: (table, its distinct ids of the step, their summed gradients, their counts) per table.
    """
    ids, grads, counts = (
        tf.concat(parts, 0) if len(parts) > 1 else parts[0] for parts in list(zip(*table_steps, strict=True))[1:]
    )
    sizes = [tf.size(step[1]) for step in table_steps]
    table_index, tags = group.index_and_tags([step[0] for step in table_steps], sizes, ids)
    hashes = keys.hash64(ids)
    parts = (ids, hashes, grads, counts, table_index, tags)
    if group.num_shards == 1:
        updates.setdefault(group.shards[0], ShardUpdate()).add_ids(group.key, parts[-1], *parts[:-1])
        return
    shard = keys.shard_of_bucket(keys.save_bucket(hashes), group.num_shards)
    split = zip(*[tf.dynamic_partition(t, shard, group.num_shards) for t in parts], strict=True)
    for group_shard, (*values, shard_tags) in zip(group.shards, split, strict=True):
        updates.setdefault(group_shard, ShardUpdate()).add_ids(group.key, shard_tags, *values)


def apply_shard(shard: GroupShard, rule: RowRule, update: ShardUpdate, step, context) -> tf.Operation:
    """On the shard's ps: count the ids, admit those due, update the rows and slots of the admitted.

    Args:
        shard: The group shard.
        rule: The optimizer's row rule.
        update: The step's rows for this shard, of every table of the group.
        step: The global step (int64) the ids are marked as seen at.
        context: The rule's per-step values (``RowRule.begin``).

    Returns:
        The op that applies them.
    """
    group = shard.group
    key, num_tables = group.key, len(group.tables)
    slot_tables = {name: shard.slot(name) for name in rule.slots}
    joined = [
        tf.concat(parts, 0) if len(parts) > 1 else parts[0]
        for parts in (update.stored, update.ids, update.hashes, update.grads, update.counts, update.table_index)
    ]
    stored, ids, hashes, grads, counts, table_index = joined
    # After the gradient, so after the step's lookups: the meta written below does not depend on the gradient,
    # and a lookup reading it first would see an id counted but without its row.
    with (
        on_device(shard.device),
        tf.name_scope("apply_" + shard.prefix.replace("/", "_")),
        tf.control_dependencies([grads]),
    ):
        new_count = shard.meta.find(stored)[:, 0] + counts
        found = shard.rows.find(stored)
        existed = tf.logical_not(tf.math.is_nan(found[:, 0]))
        missing = tf.where(tf.logical_not(existed))
        initial = initial_rows.of_group(
            group, tf.gather_nd(table_index, missing), tf.gather_nd(ids, missing), tf.gather_nd(hashes, missing)
        )
        rows = tf.tensor_scatter_nd_update(found, missing, initial)
        slots = {
            # A row without its slot (written by table_ops.insert, TFRA's upsert) starts the slot at its initial value.
            name: tf.where(
                existed[:, None],
                slot_tables[name].find(stored, default=initial_value),
                tf.cast(initial_value, key.value_dtype),
            )
            for name, initial_value in rule.slots.items()
        }
        new_rows, new_slots = rule.update(rows, slots, grads, step, context)
        if key.admit_after == 1:
            kept_keys, admitted, kept = stored, tf.ones_like(existed), (lambda values: values)
        else:
            admitted = new_count >= key.admit_after
            kept_keys = tf.boolean_mask(stored, admitted)

            def kept(values):
                return tf.boolean_mask(values, admitted)

        writes = [shard.rows.insert(kept_keys, kept(new_rows))]
        writes += [slot_tables[n].insert(kept_keys, kept(v)) for n, v in new_slots.items()]
        # The meta last: a lookup on another worker meanwhile sees an id admitted only once its row is there.
        with tf.control_dependencies(writes):
            writes.append(shard.meta.insert(stored, tf.stack([new_count, tf.fill(tf.shape(counts), step)], 1)))
        newly = tf.cast(tf.logical_and(admitted, tf.logical_not(existed)), tf.int64)
        per_table = tf.math.unsorted_segment_sum(newly, table_index, num_tables)
        tags = tf.constant([table.tag for table in group.tables], tf.int64)
        writes.append(shard.add_to_stat(tags, STAT_ADMITTED, per_table))
        return tf.group(*writes)
