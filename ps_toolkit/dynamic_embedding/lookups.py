"""Reading rows: ids of any shape, or a SparseTensor with a combiner; each shard gets only its unique ids.

A lookup flattens the ids, keeps the unique ones, splits them by shard, reads
each shard's rows on its ps (an id not admitted reads its initial row, made
there too, so only rows travel back), stitches them, and gathers them into
the ids' shape. The stitched unique rows are recorded (``LOOKUPS``): training
(``optimizer.TableOptimizer``) differentiates the loss with respect to them
and sends each shard the sum of its ids' gradients.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading

import tensorflow as tf

from ps_toolkit.base import tf_internals
from ps_toolkit.base.errors import ConfigError
from ps_toolkit.dynamic_embedding import initial_rows, keys
from ps_toolkit.dynamic_embedding.hash_tables import on_device
from ps_toolkit.dynamic_embedding.layout import GroupShard, TableGroup
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
        ids: a tensor of ids of any shape, of the table's key dtype.
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
    batch = _open_batch()
    if batch is None:
        (rows,) = read_together(table.group, [(table, unique_ids)])
    else:
        # The stand-in's input is replaced by the batch's read: an input of unknown length takes rows of any.
        unknown = tf.compat.v1.placeholder_with_default(tf.zeros([0, table.dim], table.value_dtype), [None, table.dim])
        rows = tf.identity(unknown, name="batched_rows")
        batch.pending.append((table, unique_ids, rows.op))
    rows = tf.identity(tf.ensure_shape(rows, [None, table.dim]), name="unique_rows")
    tf.compat.v1.add_to_collection(LOOKUPS, LookupRecord(table, unique_ids, counts, rows))
    return rows


class _Batch:
    """The lookups made inside one ``batched_lookups`` block, in the graph context they can be read in."""

    def __init__(self, graph):
        self.graph, self.context = graph, tf_internals.building_context(graph)
        self.pending: list[tuple[DynamicTable, tf.Tensor, tf.Operation]] = []

    def read(self) -> None:
        """Reads every pending lookup, group by group, and feeds each stand-in its rows."""
        by_group = {}
        for table, ids, stand_in in self.pending:
            by_group.setdefault(id(table.group), (table.group, []))[1].append((table, ids, stand_in))
        with tf.name_scope("batched_lookups"):
            for group, pending in by_group.values():
                rows = read_together(group, [(table, ids) for table, ids, _ in pending])
                for (_, _, stand_in), part in zip(pending, rows, strict=True):
                    tf_internals.replace_input(stand_in, 0, part)
        self.pending = []


_BATCHES = threading.local()


@contextlib.contextmanager
def batched_lookups():
    """Inside, lookups of the tables of one group are read together when the block ends.

    Each ps gets one request for all of a group's lookups, and the hashing and the
    initial rows are computed once for them: a model of a table per feature costs
    about what a model of one shared table does. A lookup made in another loop,
    cond or control-dependency block than the one the block opened in is read at once.
    ``call_model_fn`` calls every model_fn inside one.
    """
    graph = tf.compat.v1.get_default_graph()
    batch = _Batch(graph)
    stack = _batch_stack()
    stack.append(batch)
    try:
        yield
    finally:
        stack.pop()
    batch.read()


def _batch_stack() -> list:
    if not hasattr(_BATCHES, "stack"):
        _BATCHES.stack = []
    return _BATCHES.stack


def _open_batch() -> _Batch | None:
    """The innermost open batch a lookup made now can join, or None (read it at once)."""
    stack = _batch_stack()
    if not stack or tf.executing_eagerly():
        return None
    batch, graph = stack[-1], tf.compat.v1.get_default_graph()
    if batch.graph is not graph or tf_internals.building_context(graph) != batch.context:
        return None
    return batch


def read_together(group: TableGroup, table_ids: list[tuple[DynamicTable, tf.Tensor]]) -> list[tf.Tensor]:
    """The rows of each (table, distinct ids) of one group: one read per group shard, on its ps, for them all.

    Args:
        group: The tables' group.
        table_ids: (table, distinct ids) pairs, the tables of ``group``.

    Returns:
        The ``[len(ids), dim]`` rows of each pair, in order.
    """
    ids = tf.concat([ids for _, ids in table_ids], 0) if len(table_ids) > 1 else table_ids[0][1]
    hashes = keys.hash64(ids)
    if len({table.name for table, _ in table_ids}) == 1:
        table = table_ids[0][0]
        table_index = tf.fill(tf.shape(hashes), group.tables.index(table))
        tags = tf.constant(table.tag, tf.int64)
    else:
        sizes = [tf.size(ids) for _, ids in table_ids]
        indices = [group.tables.index(table) for table, _ in table_ids]
        table_index = tf.repeat(tf.constant(indices, tf.int32), tf.stack(sizes))
        tags = tf.gather(tf.constant([t.tag for t in group.tables], tf.int64), table_index)
    if group.num_shards == 1:
        rows = _read_group_shard(group.shards[0], ids, hashes, table_index, tags)
    else:
        shard = keys.shard_of_bucket(keys.save_bucket(hashes), group.num_shards)
        if tags.shape.rank == 0:
            tags = tf.fill(tf.shape(hashes), tags)
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


def records_of_graph(graph=None) -> list[LookupRecord]:
    """The lookups made in ``graph`` (default: the default graph), in order, for training their rows."""
    return (graph or tf.compat.v1.get_default_graph()).get_collection(LOOKUPS)


def _ids_tensor(table: DynamicTable, ids) -> tf.Tensor:
    ids = tf.convert_to_tensor(ids)
    if ids.dtype != table.key_dtype:
        raise ConfigError(f"dynamic table {table.name!r} has {table.key_dtype.name} keys; got {ids.dtype.name} ids")
    return ids
