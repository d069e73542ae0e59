"""Whole-table operations outside training: export, insert, remove, clear, contains, size (the TFRA surface's).

Each works shard by shard on the ps holding the ids, on the table's own
entries of its group's hash tables.
"""

from __future__ import annotations

import tensorflow as tf

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.dynamic_embedding import keys, shard_records
from ps_toolkit.dynamic_embedding.hash_tables import on_device, queryable


def export(table) -> tuple[tf.Tensor, tf.Tensor]:
    """(ids, rows) of every admitted id of ``table``."""
    return export_component(table, "rows")


def export_component(table, component: str) -> tuple[tf.Tensor, tf.Tensor]:
    """(ids, values) of one of ``table``'s components: "rows", "meta" (int64 [count, last step]) or "slot_<name>"."""
    index = table.group.tables.index(table)
    ids, rows = [], []
    for shard in table.shards:
        hash_table = dict(shard.components())[component]
        stored, values = shard_records.of_table(shard_records.entries(shard, hash_table), index)
        with on_device(shard.device):
            ids.append(keys.ids_of(table.key_dtype, stored))
            rows.append(values)
    return tf.concat(ids, 0), tf.concat(rows, 0)


def insert(table, ids, rows, seen_at_step=0) -> tf.Operation:
    """Sets the rows of ``ids``, as TFRA's ``upsert``: admitted, last seen at ``seen_at_step`` at the earliest."""
    rows = tf.reshape(tf.convert_to_tensor(rows, table.value_dtype), [-1, table.dim])
    ids = tf.reshape(_checked_ids(table, ids), [-1])
    writes = []
    hashes = keys.hash64(ids)
    shard_index = keys.shard_of_bucket(keys.save_bucket(hashes), table.num_shards)
    parts = zip(
        tf.dynamic_partition(ids, shard_index, table.num_shards),
        tf.dynamic_partition(hashes, shard_index, table.num_shards),
        tf.dynamic_partition(rows, shard_index, table.num_shards),
        strict=True,
    )
    for shard, (part_ids, part_hashes, part_rows) in zip(table.shards, parts, strict=True):
        with on_device(shard.device):
            stored = keys.stored_keys(table.key_dtype, table.tag, part_ids, part_hashes)
            meta = shard.meta.find(stored)
            seen = tf.cast(seen_at_step, tf.int64)
            admitted = tf.stack([tf.maximum(meta[:, 0], table.admit_after), tf.maximum(meta[:, 1], seen)], 1)
            written = shard.rows.insert(stored, part_rows)
            with tf.control_dependencies([written]):
                writes.append(shard.meta.insert(stored, admitted))
    return tf.group(*writes)


def contains(table, ids) -> tf.Tensor:
    """Whether each id has a row (bool, in the shape of ``ids``)."""
    given = _checked_ids(table, ids)
    ids = tf.reshape(given, [-1])
    hashes = keys.hash64(ids)
    shard_index = keys.shard_of_bucket(keys.save_bucket(hashes), table.num_shards)
    positions = tf.dynamic_partition(tf.range(tf.size(ids)), shard_index, table.num_shards)
    found = []
    for shard, part_ids, part_hashes in zip(
        table.shards,
        tf.dynamic_partition(ids, shard_index, table.num_shards),
        tf.dynamic_partition(hashes, shard_index, table.num_shards),
        strict=True,
    ):
        with on_device(shard.device):
            rows = shard.rows.find(keys.stored_keys(table.key_dtype, table.tag, part_ids, part_hashes))
            found.append(tf.logical_not(tf.math.is_nan(rows[:, 0])))
    return tf.reshape(tf.dynamic_stitch(positions, found), tf.shape(given))


def remove(table, ids) -> tf.Operation:
    """Removes ``ids`` (rows, meta, slots) from ``table``: each shard's hash tables rebuilt without them."""
    ids = tf.reshape(_checked_ids(table, ids), [-1])
    return _rebuild_without(table, lambda shard, stored: _member(table, stored, ids))


def clear(table) -> tf.Operation:
    """Removes every id of ``table``."""
    return _rebuild_without(table, lambda shard, stored: tf.equal(keys.tags_of(table.key_dtype, stored), table.tag))


def size(table) -> tf.Tensor:
    """The number of rows of ``table`` (int64 scalar)."""
    return table.size()


def _member(table, stored: tf.Tensor, ids: tf.Tensor) -> tf.Tensor:
    """Whether each stored key is (``table``, one of ``ids``)."""
    wanted = keys.stored_keys(table.key_dtype, table.tag, ids, keys.hash64(ids))
    if table.key_dtype == tf.string:
        return tf.reduce_any(tf.equal(stored[:, None], wanted[None, :]), 1)
    mine = tf.equal(stored[:, 0], table.tag)
    sorted_hashes = tf.sort(wanted[:, 1])
    position = tf.minimum(tf.searchsorted(sorted_hashes, stored[:, 1]), tf.maximum(tf.size(sorted_hashes) - 1, 0))
    hit = tf.equal(tf.gather(tf.concat([sorted_hashes, [0]], 0), position), stored[:, 1])
    return tf.logical_and(mine, tf.logical_and(hit, tf.size(sorted_hashes) > 0))


def _rebuild_without(table, drop) -> tf.Operation:
    rebuilt = []
    for shard in table.shards:
        with on_device(shard.device):
            for _, hash_table in shard.components():
                stored, values, live = hash_table.export()
                keep = tf.logical_and(live, tf.logical_not(drop(shard, queryable(stored, live))))
                rebuilt.append(hash_table.replace(tf.boolean_mask(stored, keep), tf.boolean_mask(values, keep)))
    return tf.group(*rebuilt)


def slot_names(table) -> list[str]:
    """The optimizer slots ``table``'s group has in this graph (made when its optimizer was built)."""
    return sorted(table.shards[0].slots)


def insert_slot(table, slot: str, ids, values) -> tf.Operation:
    """Sets optimizer slot ``slot``'s ``values`` for ``ids`` of ``table``, each on its shard."""
    ids = tf.reshape(_checked_ids(table, ids), [-1])
    values = tf.reshape(tf.convert_to_tensor(values, table.value_dtype), [-1, table.dim])
    hashes = keys.hash64(ids)
    shard_index = keys.shard_of_bucket(keys.save_bucket(hashes), table.num_shards)
    writes = []
    for shard, part_ids, part_hashes, part_values in zip(
        table.shards,
        tf.dynamic_partition(ids, shard_index, table.num_shards),
        tf.dynamic_partition(hashes, shard_index, table.num_shards),
        tf.dynamic_partition(values, shard_index, table.num_shards),
        strict=True,
    ):
        with on_device(shard.device):
            stored = keys.stored_keys(table.key_dtype, table.tag, part_ids, part_hashes)
            writes.append(shard.slot(slot).insert(stored, part_values))
    return tf.group(*writes)


def _checked_ids(table, ids) -> tf.Tensor:
    """``ids`` as a tensor of the table's key dtype; a ConfigError naming both for a tensor of another dtype."""
    ids = ids if isinstance(ids, tf.Tensor) else tf.convert_to_tensor(ids, table.key_dtype)
    if ids.dtype != table.key_dtype:
        raise ConfigError(f"dynamic table {table.name!r} has {table.key_dtype.name} keys; got {ids.dtype.name} ids")
    return ids
