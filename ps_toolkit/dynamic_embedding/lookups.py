"""Reading rows: ids of any shape, or a SparseTensor with a combiner; each shard gets only its unique ids.

A lookup flattens the ids, keeps the unique ones, splits them by shard, reads
each shard's rows on its ps (an id not admitted reads its initial row, made
there too, so only rows travel back), stitches them, and gathers them into
the ids' shape. The stitched unique rows are recorded (``LOOKUPS``): training
(``optimizer.TableOptimizer``) differentiates the loss with respect to them
and sends each shard the sum of its ids' gradients.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.dynamic_embedding import lookup_batches, shard_reads
from ps_toolkit.dynamic_embedding.table import LOOKUPS, DynamicTable

COMBINERS = ("sum", "mean", "sqrtn")


@dataclasses.dataclass(frozen=True)
class LookupRecord:
    """One lookup's unique ids, how often each occurred, and the rows read for them ([unique, dim])."""

    table: DynamicTable
    unique_ids: tf.Tensor
    counts: tf.Tensor
    rows: tf.Tensor

    @property
    def name(self) -> str:
        """The name of the rows tensor: how a gradient pair names its lookup."""
        return self.rows.name


def lookup(table: DynamicTable, ids, name: str | None = None) -> tf.Tensor:
    """The rows of ``ids``.

    Args:
        table: a DynamicTable from ``get_table``.
        ids: ids of any shape: a tensor of the table's key dtype, or Python ints / strings (taken as that dtype).
        name: a name scope for the ops.

    Returns:
        A tensor of shape ``ids.shape + [table.dim]`` and the table's value dtype.

    Raises:
        ConfigError: ids of another dtype than the table's keys.
    """
    with tf.name_scope(name or f"{table.name.split('/')[-1]}_lookup"):
        ids = _ids_tensor(table, ids)
        unique_ids, index, counts = tf.unique_with_counts(tf.reshape(ids, [-1]), out_idx=tf.int32)
        rows = unique_rows(table, unique_ids, counts)
        gathered = tf.gather(rows, index)
        shape = tf.concat([tf.shape(ids), [table.dim]], 0)
        result = tf.reshape(gathered, shape)
        return tf.ensure_shape(result, ids.shape.concatenate([table.dim]))


def lookup_sparse(
    table: DynamicTable,
    sp_ids: tf.SparseTensor,
    sp_weights: tf.SparseTensor | None = None,
    combiner: str = "mean",
    name: str | None = None,
) -> tf.Tensor:
    """Each row of ``sp_ids`` combined into one vector, as ``tf.nn.embedding_lookup_sparse`` does.

    Args:
        table: a DynamicTable.
        sp_ids: a 2-D SparseTensor [batch, any] of ids.
        sp_weights: None (every weight 1) or a SparseTensor of float weights with the same indices.
        combiner: "sum", "mean" (weighted mean) or "sqrtn" (weighted sum / sqrt of the squared weights' sum).
        name: a name scope for the ops.

    Returns:
        [batch, table.dim]: the combined rows; a batch row with no id gets zeros.

    Raises:
        ConfigError: an unknown combiner, or ids of another dtype than the table's keys.
    """
    if combiner not in COMBINERS:
        raise ConfigError(f"combiner {combiner!r} is not one of {', '.join(COMBINERS)}")
    with tf.name_scope(name or f"{table.name.split('/')[-1]}_lookup_sparse"):
        values = _ids_tensor(table, sp_ids.values)
        unique_ids, index, counts = tf.unique_with_counts(values, out_idx=tf.int32)
        rows = tf.gather(unique_rows(table, unique_ids, counts), index)
        segments = tf.cast(sp_ids.indices[:, 0], tf.int32)
        batch = tf.cast(sp_ids.dense_shape[0], tf.int32)
        weights = (
            tf.ones_like(segments, table.value_dtype)
            if sp_weights is None
            else tf.cast(sp_weights.values, table.value_dtype)
        )
        total = tf.math.unsorted_segment_sum(rows * weights[:, None], segments, batch)
        if combiner == "sum":
            return total
        if combiner == "mean":
            norm = tf.math.unsorted_segment_sum(weights, segments, batch)
        else:
            norm = tf.sqrt(tf.math.unsorted_segment_sum(weights * weights, segments, batch))
        return tf.math.divide_no_nan(total, norm[:, None])


def unique_rows(table: DynamicTable, unique_ids: tf.Tensor, counts: tf.Tensor) -> tf.Tensor:
    """The rows of distinct ids, read shard by shard on the ps, recorded for training.

    Inside ``batched_lookups`` the rows are a stand-in until the block ends, when the
    lookups of each group are read together.

    Args:
        table: The table to read.
        unique_ids: Distinct ids, a vector of the table's key dtype.
        counts: How often each of them occurred in the lookup.

    Returns:
        A ``[len(unique_ids), dim]`` tensor of their rows (initial rows for ids not admitted).
    """
    batch = lookup_batches.open_batch()
    if batch is None:
        (rows,) = shard_reads.read_together(table.group, [(table, unique_ids)])
    else:
        rows = batch.stand_in(table, unique_ids)
    rows = tf.identity(tf.ensure_shape(rows, [None, table.dim]), name="unique_rows")
    tf.compat.v1.add_to_collection(LOOKUPS, LookupRecord(table, unique_ids, counts, rows))
    return rows


def records_of_graph(graph=None) -> list[LookupRecord]:
    """The lookups made in ``graph`` (default: the default graph), in order, for training their rows."""
    return (graph or tf.compat.v1.get_default_graph()).get_collection(LOOKUPS)


def _ids_tensor(table: DynamicTable, ids) -> tf.Tensor:
    if not isinstance(ids, (tf.Tensor, tf.SparseTensor)):
        # Python ints (and lists of them) take the table's key dtype, as TF's own lookups take them;
        # what cannot (floats, strings for int64 keys) is converted as it is, for the one-line error below.
        try:
            ids = tf.convert_to_tensor(ids, dtype=table.key_dtype)
        except (TypeError, ValueError):
            ids = tf.convert_to_tensor(ids)
    ids = tf.convert_to_tensor(ids)
    if ids.dtype != table.key_dtype:
        raise ConfigError(f"dynamic table {table.name!r} has {table.key_dtype.name} keys; got {ids.dtype.name} ids")
    return ids
