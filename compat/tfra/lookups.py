"""TFRA's lookups (``embedding_lookup``, ``_unique``, ``_sparse``, ``safe_embedding_lookup_sparse``) on the tables.

Each is ps_toolkit's ``lookup`` / ``lookup_sparse``: the unique ids of the
batch go to their shards and only their rows come back; the rows are recorded
for ``DynamicEmbeddingOptimizer``; a graph's lookups at its top level are read
together before it runs (``deferred_reads``: one request per ps for all tables).
``return_trainable=True`` also returns a ``TrainableWrapper``, which names the table in an optimizer's ``var_list``. In
inference mode the same lookups are built (they never insert; an id with no
row reads its initial row).
"""

from __future__ import annotations

import tensorflow as tf

from ps_toolkit import dynamic_embedding as tables
from ps_toolkit_compat.tfra import deferred_reads, errors, modes, variable_ops
from ps_toolkit_compat.tfra.variable import Variable

COMBINERS = ("mean", "sqrtn", "sum")

# Sessions read deferred lookups from the moment TFRA is imported (see deferred_reads.install).
deferred_reads.install()


class TrainableWrapper:
    """What TFRA's ``return_trainable=True`` gave: the lookup's handle for an optimizer's ``var_list``.

    TFRA's was a ResourceVariable holding the looked-up rows; here the rows live only in the table,
    and the wrapper names the table (``params``), the ids and the lookup. Used as a tensor (``var0 * var0``
    in a loss, as TFRA's tests write it) it is the rows of its ids, and a loss built on it trains them.
    """

    def __init__(self, params: Variable, ids: tf.Tensor, name: str, model_mode: str, rows: tf.Tensor | None = None):
        self.params, self.ids, self.name, self.model_mode = params, ids, name, model_mode
        self._rows = rows

    def rows(self) -> tf.Tensor:
        """The rows of the wrapper's ids: its lookup's own, or (a sparse lookup's) read once when first asked."""
        if self._rows is None:
            with tf.name_scope(f"{self.name}_rows"):
                self._rows = read_rows(self.params, self.ids)
        return self._rows

    def size(self):
        return self.params.size()

    @property
    def device(self) -> str:
        """Where the lookup ran (TFRA's wrapper variable lived with the lookup, not on the ps)."""
        return self.ids.device

    def update_op(self, v0=None):
        """Upserts the wrapper's rows (``v0``, or the ids' rows as read now) into the table, as TFRA did.

        Training writes the table itself, so an id that has a row gets it back unchanged; an id that has
        none gets its initial row inserted, as TFRA's write-back of the looked-up rows did (TFRA's tests
        count the table's rows after it).
        """
        if v0 is None:
            with tf.name_scope("update_op"):
                v0 = read_rows(self.params, self.ids)
        return self.params.upsert(self.ids, v0)

    def __repr__(self):
        return f"<dynamic_embedding.TrainableWrapper {self.name!r} of {self.params.name!r}>"


def _wrapper_as_tensor(wrapper, dtype=None, name=None, as_ref=False):
    del name, as_ref
    rows = wrapper.rows()
    if dtype is not None and not dtype.is_compatible_with(rows.dtype):
        raise errors.TfraValueError(f"TrainableWrapper {wrapper.name!r} holds {rows.dtype.name} rows, not {dtype.name}")
    return rows


def _overload_operators(cls) -> None:
    """Gives ``cls`` the tensor operators (``+``, ``*``, ``[]``, ...) on its rows, as TF's variables have them.

    ``==`` and ``!=`` stay identity, so that a wrapper can be found in a ``var_list`` as TFRA's could.
    """
    for operator in tf.Tensor.OVERLOADABLE_OPERATORS - {"__eq__", "__ne__"}:
        tensor_operator = getattr(tf.Tensor, operator, None)
        if tensor_operator is not None:
            setattr(cls, operator, lambda self, *args, _op=tensor_operator: _op(self.rows(), *args))


tf.register_tensor_conversion_function(TrainableWrapper, _wrapper_as_tensor)
_overload_operators(TrainableWrapper)


def _variable(params) -> Variable:
    if isinstance(params, (list, tuple)):
        if len(params) > 1:
            raise errors.TfraValueError("Only one params is allowed.")
        params = params[0]
    if not isinstance(params, Variable):
        raise errors.TfraTypeError("params should be a Variable instance.")
    return params


def _ids(params: Variable, ids) -> tf.Tensor:
    if not isinstance(ids, tf.Tensor):
        # Python ints take the key dtype, as TF's lookups take them; floats keep theirs, for TFRA's TypeError.
        try:
            ids = tf.convert_to_tensor(ids, dtype=params.key_dtype)
        except (TypeError, ValueError):
            ids = tf.convert_to_tensor(ids)
    if ids.dtype != params.key_dtype:
        raise errors.TfraTypeError(
            f"params.key_dtype should be same with ids.dtype: {params.key_dtype!r} vs. {ids.dtype!r}"
        )
    return ids


def _wrapper(params: Variable, ids: tf.Tensor, name: str | None, rows: tf.Tensor | None = None) -> TrainableWrapper:
    """The wrapper of TFRA's ``embedding_lookup(name=name)``, keyed and named as TFRA's wrapper variable was:
    ``SCOPE/NAME/NAME:0`` (``NAME_1`` for the next lookup of that name)."""
    graph = tf.compat.v1.get_default_graph()
    scope = tf.compat.v1.get_variable_scope().name
    with tf.name_scope((f"{scope}/" if scope else "") + (name or "embedding_lookup") + "/"):
        key = name or graph.unique_name("_anonymous_trainable_store_key")
        full_name = (graph.unique_name(name) if name else key) + ":0"
    wrapper = TrainableWrapper(params, ids, full_name, modes.get_model_mode(), rows)
    params.trainable_store[key] = wrapper
    return wrapper


def _clipped(rows: tf.Tensor, max_norm) -> tf.Tensor:
    return rows if max_norm is None else tf.clip_by_norm(rows, max_norm, axes=[-1])


def embedding_lookup(
    params, ids, partition_strategy=None, name=None, validate_indices=None, max_norm=None, return_trainable=False
):
    """The rows of ``ids`` (any shape): shape ``ids.shape + [dim]``; with the TrainableWrapper if asked."""
    del partition_strategy, validate_indices  # unused in TFRA too
    errors.require_graph_mode("dynamic_embedding.embedding_lookup")
    deferred_reads.defer_lookups(tf.compat.v1.get_default_graph())
    params = _variable(params)
    ids = _ids(params, ids)
    scope = tf.compat.v1.get_variable_scope().name
    with tf.name_scope((f"{scope}/" if scope else "") + (name or "embedding_lookup") + "/"):
        rows = _clipped(params.read_values(tables.lookup(params.table, params.table_ids(ids))), max_norm)
    return (rows, _wrapper(params, ids, name, rows)) if return_trainable else rows


def embedding_lookup_unique(
    params, ids, partition_strategy=None, name=None, validate_indices=None, max_norm=None, return_trainable=False
):
    """``embedding_lookup``: every lookup here sends each shard only the batch's unique ids."""
    with tf.name_scope(name or "EmbeddingLookupUnique"):
        return embedding_lookup(
            params, ids, partition_strategy, name, validate_indices, max_norm, return_trainable=return_trainable
        )


def embedding_lookup_sparse(
    params,
    sp_ids,
    sp_weights,
    partition_strategy=None,
    name="embedding_lookup_sparse",
    combiner="mean",
    max_norm=None,
    return_trainable=False,
):
    """Each row of ``sp_ids`` combined into one vector ("sum", "mean" or "sqrtn" of its weighted rows)."""
    del partition_strategy
    if combiner not in COMBINERS:
        raise errors.TfraValueError("combiner must be one of 'mean', 'sqrtn' or 'sum'")
    if not isinstance(sp_ids, tf.SparseTensor):
        raise errors.TfraTypeError("sp_ids must be SparseTensor")
    if sp_weights is not None and not isinstance(sp_weights, tf.SparseTensor):
        raise errors.TfraTypeError("sp_weights must be either None or SparseTensor")
    errors.require_graph_mode("dynamic_embedding.embedding_lookup_sparse")
    deferred_reads.defer_lookups(tf.compat.v1.get_default_graph())
    params = _variable(params)
    values = _ids(params, sp_ids.values)
    scope = tf.compat.v1.get_variable_scope().name
    with tf.name_scope((f"{scope}/" if scope else "") + (name or "embedding_lookup_sparse") + "/"):
        if max_norm is None:
            table_ids = tf.SparseTensor(sp_ids.indices, params.table_ids(values), sp_ids.dense_shape)
            combined = tables.lookup_sparse(params.table, table_ids, sp_weights, combiner=combiner)
        else:
            combined = _combined(params, values, sp_ids, sp_weights, combiner, max_norm)
    # TFRA's sparse lookup made its wrapper by an embedding_lookup named NAME/embedding_lookup.
    return (combined, _wrapper(params, values, name and f"{name}/embedding_lookup")) if return_trainable else combined


def _combined(params: Variable, values, sp_ids, sp_weights, combiner: str, max_norm) -> tf.Tensor:
    """``lookup_sparse`` with each row clipped to ``max_norm`` before combining (TFRA's order)."""
    rows = _clipped(tables.lookup(params.table, params.table_ids(values)), max_norm)
    segments = tf.cast(sp_ids.indices[:, 0], tf.int32)
    batch = tf.cast(sp_ids.dense_shape[0], tf.int32)
    weights = tf.ones_like(segments, rows.dtype) if sp_weights is None else tf.cast(sp_weights.values, rows.dtype)
    total = tf.math.unsorted_segment_sum(rows * weights[:, None], segments, batch)
    if combiner == "sum":
        return total
    squared = weights * weights if combiner == "sqrtn" else weights
    norm = tf.math.unsorted_segment_sum(squared, segments, batch)
    return tf.math.divide_no_nan(total, (tf.sqrt(norm) if combiner == "sqrtn" else norm)[:, None])


def safe_embedding_lookup_sparse(
    embedding_weights,
    sparse_ids,
    sparse_weights=None,
    combiner="mean",
    default_id=None,
    name="safe_embedding_lookup_sparse",
    partition_strategy=None,
    max_norm=None,
    return_trainable=False,
):
    """``embedding_lookup_sparse`` for any rank, with non-positive weights dropped (unless "sum") and empty
    entries given the ``default_id``'s row, or zeros."""
    if not isinstance(sparse_ids, tf.SparseTensor):
        raise errors.TfraTypeError("sparse_ids must be SparseTensor")
    errors.require_graph_mode("dynamic_embedding.safe_embedding_lookup_sparse")
    params = _variable(embedding_weights)
    with tf.name_scope(name or "safe_embedding_lookup_sparse"):
        shape = tf.cast(sparse_ids.dense_shape, tf.int64)
        rank = tf.size(shape)
        flat_shape = tf.stack([tf.reduce_prod(shape[:-1]), shape[-1]])
        ids = tf.sparse.reshape(sparse_ids, flat_shape)
        weights = None
        if sparse_weights is not None:
            weights = tf.SparseTensor(ids.indices, sparse_weights.values, ids.dense_shape)
            if combiner != "sum":
                valid = tf.greater(weights.values, 0)
                ids, weights = tf.sparse.retain(ids, valid), tf.sparse.retain(weights, valid)
        if default_id is not None:
            ids, _ = tf.sparse.fill_empty_rows(ids, tf.cast(default_id, ids.dtype))
            if weights is not None:
                weights, _ = tf.sparse.fill_empty_rows(weights, tf.cast(1.0, weights.dtype))
        result = embedding_lookup_sparse(
            params,
            ids,
            weights,
            combiner=combiner,
            name=f"{name or 'safe_embedding_lookup_sparse'}/embedding_lookup_sparse",  # TFRA's wrapper names
            max_norm=max_norm,
            return_trainable=return_trainable,
        )
        combined, wrapper = result if return_trainable else (result, None)
        out_shape = tf.concat([tf.cast(shape[: rank - 1], tf.int32), [params.dim]], 0)
        final = tf.reshape(combined, out_shape)
        static_rank = sparse_ids.dense_shape.shape[0]
        if static_rank is not None:
            final.set_shape([None] * (static_rank - 1) + [params.dim])
    return (final, wrapper) if return_trainable else final


def read_rows(params: Variable, keys, return_exists=False, name=None) -> tf.Tensor:
    """``Variable.lookup``: the rows of ``keys``; never inserts."""
    if return_exists:
        return variable_ops.lookup_with_exists(params, _ids(params, keys), name)
    keys = variable_ops.checked_keys(params, keys)  # TFRA's table lookup: a ValueError for another key dtype
    with tf.name_scope(name or "lookup"):
        return params.read_values(tables.lookup(params.table, keys))


def trainable_wrapper_filter(iterable_object_in, test_unaggregated_function=None):
    """TFRA's split of (gradient, variable) pairs or variables: (the others, the TrainableWrappers')."""
    test = test_unaggregated_function or (lambda item: isinstance(item, TrainableWrapper))
    items = list(iterable_object_in)
    return tuple(item for item in items if not test(item)), tuple(item for item in items if test(item))
