"""Table gradients in the shape sync training aggregates: one sparse gradient per shard, keyed by id.

Design: docs/design.md, "Dynamic embedding tables".
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.dynamic_embedding import keys
from ps_toolkit.dynamic_embedding.layout import GroupShard


@dataclasses.dataclass(frozen=True)
class ShardRows:
    """The 'variable' of one shard's gradient in sync training."""

    table: object  # the DynamicTable
    shard: GroupShard

    @property
    def name(self) -> str:
        return f"{self.table.name}/shard_{self.shard.index}_of_{self.table.num_shards}/rows_gradient"

    @property
    def device(self) -> str:
        return self.shard.device or ""

    @property
    def dtype(self) -> tf.DType:
        return self.table.value_dtype

    def get_shape(self) -> tf.TensorShape:
        return tf.TensorShape([None, self.table.dim + 1])


def per_shard_pairs(table, ids, grads, counts) -> list[tuple[tf.IndexedSlices, ShardRows]]:
    """One (IndexedSlices of [gradient, count] by id, ShardRows) pair per shard, for the sync accumulators."""
    if table.key_dtype != tf.int64:
        raise ConfigError(
            f"dynamic table {table.name!r}: sync training takes int64 ids only (TensorFlow's sparse "
            f"accumulators are keyed by int64); its ids are {table.key_dtype.name}"
        )
    values = tf.concat([tf.cast(grads, table.value_dtype), tf.cast(counts, table.value_dtype)[:, None]], 1)
    if table.num_shards == 1:
        return [(tf.IndexedSlices(values, ids), ShardRows(table, table.shards[0]))]
    shard = keys.shard_of(ids, table.num_shards)
    id_parts = tf.dynamic_partition(ids, shard, table.num_shards)
    value_parts = tf.dynamic_partition(values, shard, table.num_shards)
    return [
        (tf.IndexedSlices(v, i), ShardRows(table, s))
        for s, i, v in zip(table.shards, id_parts, value_parts, strict=True)
    ]


def split_values(table, values: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """(mean gradient, mean count as int64, at least 1) from an aggregated [gradient, count] block."""
    counts = tf.maximum(tf.cast(tf.round(values[:, table.dim]), tf.int64), 1)
    return values[:, : table.dim], counts
