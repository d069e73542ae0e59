"""Table-level operations on a DynamicTable: export, insert, remove, clear, contains and size of its rows.

Each builds graph ops that run on the shards' ps. An id counts as in the
table when it has a row (it was admitted); ``insert`` admits the ids it
writes, whatever their seen-count was, and keeps their last-seen step.

    ids, rows = table_ops.export(table)
    sess.run(table_ops.insert(table, tf.constant([3, 7], tf.int64), new_rows))
"""

from __future__ import annotations

import tensorflow as tf

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.dynamic_embedding import keys
from ps_toolkit.dynamic_embedding.apply import count_stat
from ps_toolkit.dynamic_embedding.hash_tables import on_device
from ps_toolkit.dynamic_embedding.table import STAT_ADMITTED, DynamicTable, TableShard


def export(table: DynamicTable) -> tuple[tf.Tensor, tf.Tensor]:
    """(ids [n], rows [n, dim]) of every row of every shard, shard after shard."""
    parts = [shard.rows.export() for shard in table.shards]
    return tf.concat([ids for ids, _ in parts], 0), tf.concat([rows for _, rows in parts], 0)


def insert(table: DynamicTable, ids, rows) -> tf.Operation:
    """Writes ``rows`` ([n, dim]) as the rows of ``ids`` ([n]; the last of a repeated id wins) and admits them."""
    ids, rows = _checked_ids(table, ids), tf.convert_to_tensor(rows, table.value_dtype)
    rows = tf.ensure_shape(rows, [None, table.dim])
    return _per_shard(table, ids, _insert_shard, rows)


def _insert_shard(shard: TableShard, ids, rows) -> tf.Operation:
    table = shard.table
    with on_device(shard.device):
        meta = shard.meta.find(ids)
        was_admitted = meta[:, 0] >= table.admit_after
        count = tf.maximum(meta[:, 0], table.admit_after)
        written = shard.rows.insert(ids, rows)
        # The meta after the rows: a concurrent lookup sees an id admitted only once its row is there.
        with tf.control_dependencies([written]):
            admitted = shard.meta.insert(ids, tf.stack([count, meta[:, 1]], 1))
        newly = tf.size(tf.unique(tf.boolean_mask(ids, tf.logical_not(was_admitted)))[0], out_type=tf.int64)
        return tf.group(written, admitted, count_stat(shard, STAT_ADMITTED, newly))


def remove(table: DynamicTable, ids) -> tf.Operation:
    """Removes ``ids`` ([n]) from every shard: row, seen-count and the optimizer slots made so far."""
    ids = _checked_ids(table, ids)
    return _per_shard(table, ids, _remove_shard)


def _remove_shard(shard: TableShard, ids) -> tf.Operation:
    with on_device(shard.device):
        return tf.group(*[hash_table.remove(ids) for hash_table in _id_tables(shard)])


def clear(table: DynamicTable) -> tf.Operation:
    """Removes every id of every shard (rows, seen-counts, slots made so far); the counters stay."""
    cleared = []
    for shard in table.shards:
        with on_device(shard.device):
            known, _ = shard.meta.export()
            rows, _ = shard.rows.export()
            every = tf.concat([known, rows], 0)
            with tf.control_dependencies([every]):
                cleared += [hash_table.remove(every) for hash_table in _id_tables(shard)]
    return tf.group(*cleared)


def contains(table: DynamicTable, ids) -> tf.Tensor:
    """A bool per id of ``ids`` (any shape): whether it has a row."""
    ids = _checked_ids(table, ids, any_shape=True)
    flat = tf.reshape(ids, [-1])
    if table.num_shards == 1:
        found = _contains_shard(table.shards[0], flat)
    else:
        shard = keys.shard_of(flat, table.num_shards)
        parts = tf.dynamic_partition(flat, shard, table.num_shards)
        positions = tf.dynamic_partition(tf.range(tf.size(flat)), shard, table.num_shards)
        found = tf.dynamic_stitch(positions, [_contains_shard(s, p) for s, p in zip(table.shards, parts, strict=True)])
    return tf.reshape(found, tf.shape(ids))


def _contains_shard(shard: TableShard, ids) -> tf.Tensor:
    with on_device(shard.device):
        return shard.meta.find(ids)[:, 0] >= shard.table.admit_after


def size(table: DynamicTable) -> tf.Tensor:
    """The number of rows over all shards (an int64 scalar)."""
    return table.size()


def _id_tables(shard: TableShard) -> list:
    return [shard.rows, shard.meta, *shard.slots.values()]


def _checked_ids(table: DynamicTable, ids, any_shape: bool = False) -> tf.Tensor:
    ids = ids if isinstance(ids, tf.Tensor) else tf.convert_to_tensor(ids, table.key_dtype)
    if ids.dtype != table.key_dtype:
        raise ConfigError(f"dynamic table {table.name!r} has {table.key_dtype.name} keys; got {ids.dtype.name} ids")
    return ids if any_shape else tf.ensure_shape(ids, [None])


def _per_shard(table: DynamicTable, ids, build, rows=None) -> tf.Operation:
    """``build(shard, its ids[, its rows])`` on every shard, the ids split by the table's hash."""
    extra = () if rows is None else (rows,)
    if table.num_shards == 1:
        return build(table.shards[0], ids, *extra)
    shard_index = keys.shard_of(ids, table.num_shards)
    split = [tf.dynamic_partition(part, shard_index, table.num_shards) for part in (ids, *extra)]
    return tf.group(*[build(shard, *[part[i] for part in split]) for i, shard in enumerate(table.shards)])
