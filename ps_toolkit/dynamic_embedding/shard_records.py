"""Reading a group shard's hash tables whole, on its ps: its entries, split by table and by save bucket.

The maintenance, the table operations and the saves all scan a shard this way:
one export of a hash table (no copy for the dense tables), each entry's table
found from its stored key's tag, then one ``tf.dynamic_partition`` that
copies the selected entries once.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from ps_toolkit.dynamic_embedding import keys
from ps_toolkit.dynamic_embedding.hash_tables import HashTable, on_device


@dataclasses.dataclass(frozen=True)
class Entries:
    """One export of a hash table: stored keys, values, which rows are entries, and each row's table index.

    ``table_index`` is the index in the group's tables, ``len(tables)`` for rows that are no entry of
    a table of this graph (empty buckets, tables another graph made).
    """

    stored: tf.Tensor
    values: tf.Tensor
    table_index: tf.Tensor
    num_tables: int


def entries(shard, hash_table: HashTable) -> Entries:
    """The entries of ``hash_table`` (one of ``shard``'s), exported on its ps."""
    group = shard.group
    with on_device(shard.device):
        stored, values, live = hash_table.export()
        # Empty and deleted buckets carry negative tags, which no table has: past the end too.
        index = tf.where(live, group.table_index(keys.tags_of(group.key.key_dtype, stored)), len(group.tables))
        return Entries(stored, values, index, len(group.tables))


def of_table(found: Entries, table_index: int) -> tuple[tf.Tensor, tf.Tensor]:
    """(stored keys, values) of one table's entries."""
    mine = tf.equal(found.table_index, table_index)
    return tf.boolean_mask(found.stored, mine), tf.boolean_mask(found.values, mine)


def row_count(table, shard) -> tf.Tensor:
    """The number of rows ``table`` has on ``shard`` (int64 scalar)."""
    found = entries(shard, shard.rows)
    index = shard.group.tables.index(table)
    with on_device(shard.device):
        return tf.reduce_sum(tf.cast(tf.equal(found.table_index, index), tf.int64))


def row_counts(shard) -> tf.Tensor:
    """The number of rows of each of the group's tables on ``shard`` (int64 [num_tables])."""
    found = entries(shard, shard.rows)
    with on_device(shard.device):
        return tf.math.bincount(found.table_index, minlength=found.num_tables + 1, dtype=tf.int64)[:-1]
