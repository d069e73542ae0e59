"""Reading rows of a group's tables on its shards: one request per ps for every table of the group.

The distinct ids of the lookups are hashed once, split by shard once, and each
shard's part is read on its ps with one find; an id with no row there gets its
initial row, computed on the ps too, so only rows travel back.
"""

from __future__ import annotations

import tensorflow as tf

from ps_toolkit.dynamic_embedding import initial_rows, keys
from ps_toolkit.dynamic_embedding.hash_tables import on_device
from ps_toolkit.dynamic_embedding.layout import GroupShard, TableGroup


def read_together(group: TableGroup, table_ids: list) -> list[tf.Tensor]:
    """The rows of each (table, distinct ids) of one group: one read per group shard, on its ps, for them all.

    Args:
        group: The tables' group.
        table_ids: (table, distinct ids) pairs, the tables of ``group``.

    Returns:
        The ``[len(ids), dim]`` rows of each pair, in order.
    """
    ids = tf.concat([ids for _, ids in table_ids], 0) if len(table_ids) > 1 else table_ids[0][1]
    hashes = keys.hash64(ids)
    sizes = [tf.size(ids) for _, ids in table_ids]
    table_index, tags = group.index_and_tags([table for table, _ in table_ids], sizes, ids)
    if group.num_shards == 1:
        rows = _read_group_shard(group.shards[0], ids, hashes, table_index, tags)
    else:
        shard = keys.shard_of_bucket(keys.save_bucket(hashes), group.num_shards)
        count = group.num_shards
        parts = zip(*[tf.dynamic_partition(t, shard, count) for t in (ids, hashes, table_index, tags)], strict=True)
        positions = tf.dynamic_partition(tf.range(tf.size(ids)), shard, count)
        read = [_read_group_shard(group_shard, *part) for group_shard, part in zip(group.shards, parts, strict=True)]
        rows = tf.dynamic_stitch(positions, read)
    if len(table_ids) == 1:
        return [rows]
    return tf.split(rows, tf.stack(sizes), num=len(table_ids))


def _read_group_shard(shard: GroupShard, ids, hashes, table_index, tags) -> tf.Tensor:
    """On the shard's ps: the rows of ids of the group's tables; the initial row, made there, for those without one."""
    key = shard.group.key
    with on_device(shard.device):
        rows = shard.rows.find(keys.stored_keys(key.key_dtype, tags, ids, hashes))
        # An absent id reads NaN: only those get their initial row computed.
        missing = tf.where(tf.math.is_nan(rows[:, 0]))
        initial = initial_rows.of_group(
            shard.group, tf.gather_nd(table_index, missing), tf.gather_nd(ids, missing), tf.gather_nd(hashes, missing)
        )
        return tf.tensor_scatter_nd_update(rows, missing, initial)
