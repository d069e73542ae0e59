"""TFRA's restrict policies on the tables' own bookkeeping: evict the least recently or least often seen ids.

Every shard of a ps_toolkit table already records, for each id it trained, how
often it was seen and the global step it was last seen at. TFRA's
``var.restrict(num_reserved, trigger=t)`` becomes one op: when the table holds
more than ``t`` rows, each shard keeps ``num_reserved / shards`` of them and
evicts the rest (row, optimizer slots and record) - the oldest by last-seen
global step (``TimestampRestrictPolicy``; in a graph without a global step, by
the wall-clock second, as TFRA did always) or the
least often seen (``FrequencyRestrictPolicy``).
"""

from __future__ import annotations

import tensorflow as tf

from ps_toolkit.dynamic_embedding import eviction, keys, optimizer, shard_records, table_ops
from ps_toolkit.dynamic_embedding.hash_tables import on_device
from ps_toolkit_compat.tfra import errors, refused

_COUNT, _LAST_SEEN = 0, 1  # the columns of a shard's meta table


class RestrictPolicy:
    """TFRA's base class; pass a subclass (the class, not an instance) as ``restrict_policy``."""

    SCORE_COLUMN = None

    def __init__(self, var):
        self.var = var
        self.params_in_slots = []

    def apply_update(self, ids):
        """The op recording ``ids`` as seen once more, at the current global step (training records its ids
        itself; TFRA's optimizer called this)."""
        table = self.var.table
        flat = tf.unique(tf.reshape(self.var.table_ids(tf.convert_to_tensor(ids, self.var.key_dtype)), [-1]))[0]
        hashes = keys.hash64(flat)
        shard_index = keys.shard_of_bucket(keys.save_bucket(hashes), table.num_shards)
        parts = zip(
            tf.dynamic_partition(flat, shard_index, table.num_shards),
            tf.dynamic_partition(hashes, shard_index, table.num_shards),
            strict=True,
        )
        return tf.group(*[_record_shard(table, shard, *part) for shard, part in zip(table.shards, parts, strict=True)])

    @property
    def status(self):
        """TFRA's status variable: ``size()`` (the ids recorded) and ``export()`` (ids, their score)."""
        return PolicyStatus(self.var, self.SCORE_COLUMN)

    def apply_restriction(self, num_reserved, **kwargs):
        """The op restricting the variable to ``num_reserved`` rows when it holds more than ``trigger``."""
        if not isinstance(num_reserved, int):
            raise errors.TfraTypeError("num_reserved should be integer.")
        if num_reserved < 0:
            raise errors.TfraValueError("num_reserved should be non-negative.")
        trigger = kwargs.get("trigger", num_reserved)
        if not isinstance(trigger, int):
            raise errors.TfraTypeError("trigger should be integer.")
        table = self.var.table
        keep = int(num_reserved / table.num_shards)
        return tf.compat.v1.cond(
            tf.greater(table.size(), trigger),
            lambda: tf.group(*[evict_shard(table, shard, keep, self.SCORE_COLUMN) for shard in table.shards]),
            tf.no_op,
        )


class TimestampRestrictPolicy(RestrictPolicy):
    """Evicts the ids seen longest ago (by global step) first."""

    SCORE_COLUMN = _LAST_SEEN


class FrequencyRestrictPolicy(RestrictPolicy):
    """Evicts the ids seen least often first."""

    SCORE_COLUMN = _COUNT


class PolicyStatus:
    """The ids a table records (seen-count and last-seen step per id), as TFRA's policy status variable."""

    def __init__(self, var, score_column: int):
        self.var, self.score_column = var, score_column
        self.name = f"{var.name}/status"

    def size(self, name=None) -> tf.Tensor:
        with tf.name_scope(name or "status_size"):
            ids, _ = self.export()
            return tf.size(ids, out_type=tf.int64)

    def export(self, name=None) -> tuple[tf.Tensor, tf.Tensor]:
        """(ids, score): the last-seen global step (Timestamp) or the seen-count (Frequency) of each id."""
        with tf.name_scope(name or "status_export"):
            ids, meta = table_ops.export_component(self.var.table, "meta")
            scores = meta[:, self.score_column]
            return (tf.cast(ids, tf.int32) if self.var.key_dtype == tf.int32 else ids), scores


def _record_shard(table, shard, ids, hashes) -> tf.Operation:
    """On the shard's ps: each of ``ids`` seen once more, last at the global step (the wall-clock second without
    one, see optimizer.seen_at)."""
    step = optimizer.seen_at(tf.compat.v1.train.get_global_step())
    admit_after = table.admit_after
    with on_device(shard.device):
        stored = keys.stored_keys(table.key_dtype, table.tag, ids, hashes)
        meta = shard.meta.find(stored)
        count = meta[:, _COUNT] + 1
        # An id admitted by this count gets its initial row first, as training admits it: it reads the same.
        due = tf.logical_and(count >= admit_after, meta[:, _COUNT] < admit_after)
        admitted = shard.rows.insert(tf.boolean_mask(stored, due), table.initial_rows(tf.boolean_mask(ids, due)))
        now = tf.fill(tf.shape(ids), step)
        with tf.control_dependencies([admitted]):
            return shard.meta.insert(stored, tf.stack([count, now], 1))


def make_policy(policy_class, var):
    """The policy TFRA's ``restrict_policy=`` asks for, or None; TFRA's TypeError for anything but a subclass."""
    if policy_class is None:
        return None
    if not isinstance(policy_class, type) or not issubclass(policy_class, RestrictPolicy):
        raise errors.TfraTypeError("restrict_policy must be subclass of RestrictPolicy.")
    if policy_class.SCORE_COLUMN is None:
        raise refused.NotServedUseError(
            f"restrict_policy {policy_class.__name__}: only TimestampRestrictPolicy and FrequencyRestrictPolicy "
            "are served"
        )
    return policy_class(var)


def evict_shard(table, shard, keep: int, score_column: int) -> tf.Operation:
    """On the shard's ps: removes all but the ``keep`` best-scored ids of ``table`` (row, slots, record); counts
    the evictions."""
    with on_device(shard.device), tf.name_scope("restrict_" + shard.prefix.replace("/", "_")):
        found = shard_records.entries(shard, shard.meta)
        mine = tf.equal(found.table_index, shard.group.tables.index(table))
        # The table's entries by score, best first; the others' entries stay whatever their score.
        scores = tf.where(mine, found.values[:, score_column], tf.int64.min)
        order = tf.argsort(scores, direction="DESCENDING", stable=True)
        rank = tf.scatter_nd(order[:, None], tf.range(tf.size(order)), tf.shape(order))
        evicted = tf.logical_and(mine, rank >= keep)
        kept = tf.logical_and(found.table_index < found.num_tables, tf.logical_not(evicted))
        return eviction.keep_only(shard, found, kept, evicted)
