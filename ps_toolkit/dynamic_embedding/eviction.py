"""Eviction, on each group shard's ps: ids not seen for a number of global steps, then the least recently seen.

Each table keeps its own policy (``evict_after_steps``, ``max_rows_per_shard``);
a group shard evicts for all its tables in one pass: one scan of its meta, and
each hash table rebuilt once without the evicted ids (``HashTable.replace``:
the dense tables never remove keys one by one). Rows an async worker writes
while that pass runs may be rebuilt away; the next steps write them again.
"""

from __future__ import annotations

import tensorflow as tf

from ps_toolkit.dynamic_embedding import hash_tables, shard_records
from ps_toolkit.dynamic_embedding.hash_tables import on_device
from ps_toolkit.dynamic_embedding.layout import STAT_EVICTED, GroupShard, TableGroup
from ps_toolkit.dynamic_embedding.table import UNBOUNDED

NO_LIMIT = 2**62  # a bound no shard reaches


def evicts(table) -> bool:
    """Whether the table has an eviction policy (a bound on its rows, its own or the default, or an age)."""
    return table.evict_after_steps is not None or table.max_rows_per_shard != UNBOUNDED


def bound_input(shard: GroupShard) -> tf.Tensor:
    """Each of the shard's tables' bound on its rows (int64 [num_tables + 1]), to feed at each run.

    By default the bounds the tables were given (none for a default or no bound); the maintenance feeds
    the default bounds from the ps's memory (``row_bounds``).
    """
    given = _given_bounds(shard.group.tables)
    with on_device(shard.device):
        return tf.compat.v1.placeholder_with_default(tf.constant(given, tf.int64), [len(given)], name="row_bounds")


def eviction_op(group: TableGroup, global_step, bounds: dict | None = None) -> tf.Operation:
    """The op evicting, as of ``global_step``, from every shard of ``group`` (or a table's group) by each policy.

    Args:
        group: The group (or a table of it).
        global_step: The global step the ages count from.
        bounds: shard -> its ``bound_input``; by default the bounds the tables were given.
    """
    group = getattr(group, "group", group)
    step = tf.cast(tf.convert_to_tensor(global_step), tf.int64)
    bounds = bounds or {}
    return tf.group(*[evict_shard(shard, step, bounds.get(shard)) for shard in group.shards])


def evict_shard(shard: GroupShard, step: tf.Tensor, limit: tf.Tensor | None = None) -> tf.Operation:
    """Evicts from one group shard by each table's policy (``limit``: each table's bound, as ``bound_input``).

    With no age policy the shard is scanned only when it holds more ids than its smallest bound, and
    rebuilt only when an id goes: a bound that is not reached costs one size read.
    """
    tables = shard.group.tables
    not_seen_for = tf.constant([t.evict_after_steps or NO_LIMIT for t in tables] + [NO_LIMIT], tf.int64)
    if limit is None:
        limit = tf.constant(_given_bounds(tables), tf.int64)
    by_age = any(t.evict_after_steps is not None for t in tables)
    with on_device(shard.device), tf.name_scope("evict_" + shard.prefix.replace("/", "_")):

        def scan_and_evict():
            found = shard_records.entries(shard, shard.meta)
            last_seen = found.values[:, 1]
            index = found.table_index
            live = index < found.num_tables
            evicted = tf.logical_and(live, last_seen < step - tf.gather(not_seen_for, index))
            # Each table's most recently seen first: an entry's rank among its table's kept entries.
            kept_last_seen = tf.where(
                tf.logical_or(evicted, tf.logical_not(live)), tf.constant(-1, tf.int64), last_seen
            )
            rank = _rank_within_table(index, kept_last_seen, found.num_tables + 1)
            evicted = tf.logical_or(evicted, tf.logical_and(live, rank >= tf.gather(limit, index)))
            kept = tf.logical_and(live, tf.logical_not(evicted))
            return tf.compat.v1.cond(tf.reduce_any(evicted), lambda: keep_only(shard, found, kept, evicted), tf.no_op)

        if by_age:
            return scan_and_evict()
        return tf.compat.v1.cond(shard.meta.size() > tf.reduce_min(limit), scan_and_evict, tf.no_op)


def _given_bounds(tables) -> list:
    """Each table's own bound (none for a default or no bound), and none for the entries of no table."""
    return [t.max_rows_per_shard or NO_LIMIT for t in tables] + [NO_LIMIT]


def _rank_within_table(index: tf.Tensor, score: tf.Tensor, num_parts: int) -> tf.Tensor:
    """Each entry's rank (0 = highest ``score``) among the entries of its table."""
    # Sort by score, highest first, then stably by table: each table's entries become a run, best first.
    by_score = tf.argsort(score, direction="DESCENDING", stable=True)
    by_table = tf.gather(by_score, tf.argsort(tf.gather(index, by_score), stable=True))
    sorted_index = tf.gather(index, by_table)
    run_start = tf.math.unsorted_segment_min(tf.range(tf.size(index)), sorted_index, num_parts)
    rank_sorted = tf.range(tf.size(index)) - tf.gather(run_start, sorted_index)
    return tf.scatter_nd(by_table[:, None], tf.cast(rank_sorted, tf.int64), tf.shape(index))


def keep_only(shard: GroupShard, meta_entries, keep: tf.Tensor, evicted: tf.Tensor) -> tf.Operation:
    """Rebuilds the shard's hash tables with only the meta entries ``keep`` marks; counts the evicted rows.

    Args:
        shard: The group shard.
        meta_entries: ``shard_records.entries`` of its meta.
        keep: Which of those entries stay.
        evicted: Which of them go (entries that are neither, such as empty buckets, are dropped too).

    Returns:
        The op that rebuilds and counts.
    """
    group = shard.group
    gone = tf.boolean_mask(meta_entries.stored, evicted)
    rows_gone = tf.logical_not(tf.math.is_nan(shard.rows.find(gone)[:, 0]))
    per_table = tf.math.unsorted_segment_sum(
        tf.cast(rows_gone, tf.int64), tf.boolean_mask(meta_entries.table_index, evicted), len(group.tables)
    )
    with tf.control_dependencies([per_table]):
        rebuilt = [
            shard.meta.replace(tf.boolean_mask(meta_entries.stored, keep), tf.boolean_mask(meta_entries.values, keep))
        ]
    with tf.control_dependencies(rebuilt):
        for _, hash_table in shard.components()[:1] + shard.components()[2:]:
            stored, values, live = hash_table.export()
            # Only live keys are looked up: a dense table refuses its reserved (empty, deleted) keys.
            still = tf.logical_and(live, shard.meta.find(hash_tables.queryable(stored, live))[:, 0] > 0)
            rebuilt.append(hash_table.replace(tf.boolean_mask(stored, still), tf.boolean_mask(values, still)))
    tags = tf.constant([table.tag for table in group.tables], tf.int64)
    with tf.control_dependencies(rebuilt):
        return shard.add_to_stat(tags, STAT_EVICTED, per_table)
