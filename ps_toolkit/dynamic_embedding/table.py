"""A dynamic embedding table: id -> row, sharded over the ps by a hash of the id; created once per graph by name.

A table's rows live in its group's hash tables on each ps (``layout``), keyed
by (table tag, id): the rows, the meta (int64 [count seen, global step last
seen]), one table per optimizer slot and the counters (admissions,
evictions). A row exists only for an admitted id; an id with a meta entry but
no row is still being counted towards admission.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Sequence

import tensorflow as tf

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.dynamic_embedding import keys, layout
from ps_toolkit.dynamic_embedding.initial_rows import InitialRows
from ps_toolkit.dynamic_embedding.layout import NEVER_SEEN, STAT_ADMITTED, STAT_EVICTED  # noqa: F401 - re-exported

TABLES = "ps_toolkit_dynamic_tables"
# graph -> {full name: DynamicTable}. Not a graph collection: an exported MetaGraph (estimator export, the
# chief's .meta files) would list the tables' names as graph elements, and loading it would fail on them.
_TABLES_BY_GRAPH = weakref.WeakKeyDictionary()
_DEVICES = "ps_toolkit_dynamic_table_devices"
# The graph collection of the lookups' records (lookups.py adds them; training reads them).
LOOKUPS = "ps_toolkit_dynamic_lookups"
VALUE_DTYPES = (tf.float32, tf.float64, tf.float16, tf.bfloat16)
_INT64_MAX = 2**63 - 1
UNBOUNDED = 0  # max_rows_per_shard=0: no bound on a shard's rows (None: the default bound from the ps's memory)


@contextlib.contextmanager
def shard_devices(devices: Sequence[str] | None):
    """Tables created inside, without ``devices`` of their own, get one shard per device (the toolkit's ps).

    Args:
        devices: One device string per shard; None or empty: one local shard.

    Yields:
        Nothing; the devices hold inside the ``with`` block.
    """
    graph = tf.compat.v1.get_default_graph()
    stack = graph.get_collection_ref(_DEVICES)
    stack.append(tuple(devices or ()))  # none (no ps): one local shard, as default_devices says
    try:
        yield
    finally:
        stack.pop()


def default_devices() -> tuple:
    """The shard devices in effect: the innermost ``shard_devices``, else one shard with no device."""
    stack = tf.compat.v1.get_default_graph().get_collection(_DEVICES)
    return stack[-1] if stack and stack[-1] else (None,)


class DynamicTable:
    """An id -> row table over the ps shards; get one with ``get_table``. Read it with ``lookup``."""

    def __init__(
        self,
        name,
        dim,
        key_dtype,
        value_dtype,
        initializer,
        admit_after,
        evict_after_steps,
        max_rows_per_shard,
        devices,
    ):
        self.name, self.dim = name, dim
        self.key_dtype, self.value_dtype = key_dtype, value_dtype
        self.initializer = initializer
        self.admit_after = admit_after
        self.evict_after_steps, self.max_rows_per_shard = evict_after_steps, max_rows_per_shard
        self.devices = tuple(devices)
        self.num_shards = len(self.devices)
        self.tag = keys.table_tag(name)
        self.group = layout.group_of(
            layout.GroupKey(key_dtype, value_dtype, dim, self.devices, _initial_kind(initializer), admit_after)
        )
        self.group.add(self)

    @property
    def shards(self) -> list[layout.GroupShard]:
        """The group shards holding this table's rows, in shard order."""
        return self.group.shards

    def initial_rows(self, ids: tf.Tensor) -> tf.Tensor:
        """The rows ``ids`` have before any training: the table's ``InitialRows``, seeded by id."""
        return self.initializer.rows(ids, self.dim, self.value_dtype)

    def size(self) -> tf.Tensor:
        """The number of rows (admitted ids) over all shards: an int64 scalar."""
        return tf.add_n(self.shard_sizes())

    def shard_sizes(self) -> list[tf.Tensor]:
        """The number of rows of each shard: int64 scalars, in shard order (a scan of each shard's rows)."""
        from ps_toolkit.dynamic_embedding import shard_records  # reads the layout, which this module builds

        return [shard_records.row_count(self, shard) for shard in self.shards]

    def stat(self, which: int) -> tf.Tensor:
        """Admissions (STAT_ADMITTED) or evictions (STAT_EVICTED) over all shards since their ps started."""
        return tf.add_n([shard.read_stat(self.tag, which) for shard in self.shards])

    def __repr__(self):
        return f"DynamicTable({self.name!r}, dim={self.dim}, key_dtype={self.key_dtype.name}, shards={self.num_shards})"


def get_table(
    name: str,
    dim: int,
    *,
    key_dtype=tf.int64,
    value_dtype=tf.float32,
    initializer: InitialRows | None = None,
    admit_after: int = 1,
    evict_after_steps: int | None = None,
    max_rows_per_shard: int | None = None,
    devices=None,
) -> DynamicTable:
    """The dynamic table ``name`` (under the current variable scope), made on first call.

    Args:
        name: the table's name; with the variable scope it names the table in checkpoints.
        dim: the length of each row (> 0).
        key_dtype: tf.int64 or tf.string.
        value_dtype: a float dtype.
        initializer: the rows of ids never trained (``InitialRows``; default normal, stddev 0.05).
        admit_after: an id gets a row (and is trained) once seen this many times in training
            batches (>= 1; 1 admits every id at once).
        evict_after_steps: ids not seen in the last this many global steps are evicted when the
            chief's maintenance runs (None: never).
        max_rows_per_shard: beyond this many rows in a shard, the least recently seen are evicted
            when the maintenance runs. None: a default bound from the ps's memory
            (``row_bounds``); 0 (``UNBOUNDED``): no bound.
        devices: one shard per device; default: one per ps of the toolkit's cluster (one local
            shard outside a cluster).

    Returns:
        The DynamicTable. In a variable scope with ``reuse`` on, the table made before under that
        name (the toolkit calls a model_fn again with reuse to build its step).

    Raises:
        ConfigError: a key dtype other than int64 or string, a dim or threshold out of range, or
            a name used twice without reuse, or reused with another dim or dtype.
    """
    scope = tf.compat.v1.get_variable_scope()
    full_name = f"{scope.name}/{name}" if scope.name else name
    key_dtype = keys.check_key_dtype(key_dtype, full_name)
    value_dtype = tf.as_dtype(value_dtype)
    if value_dtype not in VALUE_DTYPES:
        raise ConfigError(f"dynamic table {full_name!r}: value dtype {value_dtype.name} is not a float dtype")
    _check_positive_int(full_name, "dim", dim)
    _check_positive_int(full_name, "admit_after", admit_after, "an admission threshold below 1 admits nothing")
    if evict_after_steps is not None:
        _check_positive_int(full_name, "evict_after_steps", evict_after_steps)
    if max_rows_per_shard is not None and max_rows_per_shard != UNBOUNDED:
        _check_positive_int(full_name, "max_rows_per_shard", max_rows_per_shard, "or 0 for no bound")
    if initializer is not None and not isinstance(initializer, InitialRows):
        raise ConfigError(f"dynamic table {full_name!r}: initializer {initializer!r} is not an InitialRows")
    existing = _TABLES_BY_GRAPH.setdefault(tf.compat.v1.get_default_graph(), {})
    if full_name in existing:
        return _reused(existing[full_name], scope.reuse, dim, key_dtype, value_dtype)
    table = DynamicTable(
        full_name,
        dim,
        key_dtype,
        value_dtype,
        initializer or InitialRows(),
        admit_after,
        evict_after_steps,
        max_rows_per_shard,
        devices if devices is not None else default_devices(),
    )
    existing[full_name] = table
    from ps_toolkit.dynamic_embedding import saving  # saving needs the table's class, not the other way

    if len(table.group.tables) == 1:  # a new group: its hash tables join the checkpoints
        saving.register_saveables(table.group)
    return table


def tables_of_graph(graph=None) -> list[DynamicTable]:
    """The dynamic tables made in ``graph`` (default: the default graph)."""
    return list(_TABLES_BY_GRAPH.get(graph or tf.compat.v1.get_default_graph(), {}).values())


def _reused(table: DynamicTable, reuse, dim, key_dtype, value_dtype) -> DynamicTable:
    if not reuse:
        raise ConfigError(
            f"dynamic table name {table.name!r} is used twice; give each table its own name "
            "(or reuse it inside a variable scope with reuse=True)"
        )
    if (dim, key_dtype, value_dtype) != (table.dim, table.key_dtype, table.value_dtype):
        raise ConfigError(
            f"dynamic table {table.name!r} is reused with dim={dim}, {key_dtype.name} keys, {value_dtype.name} "
            f"values; it was made with dim={table.dim}, {table.key_dtype.name}, {table.value_dtype.name}"
        )
    return table


def _check_positive_int(table_name: str, field: str, value, why: str = "") -> None:
    reason = f" ({why})" if why else ""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"dynamic table {table_name!r}: {field}={value!r} must be an integer >= 1{reason}")
    if value > _INT64_MAX:  # the tables' counts and bounds are int64 tensors
        raise ConfigError(f"dynamic table {table_name!r}: {field}={value!r} must be at most {_INT64_MAX}{reason}")


def clear_graph_collections(graph=None) -> bool:
    """Empties the collections that hold the tables' Python objects, before a meta graph export.

    The tables' saveables go too: build the Saver first.

    Args:
        graph: The graph; by default the default graph.

    Returns:
        True if the graph had any table.
    """
    graph = graph or tf.compat.v1.get_default_graph()
    had_tables = bool(tables_of_graph(graph))
    if had_tables:
        _TABLES_BY_GRAPH.pop(graph, None)
        layout.forget_groups(graph)
        for key in (_DEVICES, LOOKUPS, tf.compat.v1.GraphKeys.SAVEABLE_OBJECTS):
            graph.clear_collection(key)
    return had_tables


def _initial_kind(initializer: InitialRows) -> str:
    """What tables of one group share of their initial rows: the distribution, or a class of its own.

    An initializer of its own class computes each table's rows its way (apply.py calls each table's).
    """
    if type(initializer) is InitialRows:
        return initializer.distribution
    return f"{type(initializer).__module__}.{type(initializer).__qualname__}"
