"""TFRA's restrict policies on the tables' own bookkeeping: evict the least recently or least often seen ids.

Every shard of a ps_toolkit table already records, for each id it trained, how
often it was seen and the global step it was last seen at. TFRA's
``var.restrict(num_reserved, trigger=t)`` becomes one op: when the table holds
more than ``t`` rows, each shard keeps ``num_reserved / shards`` of them and
evicts the rest (row, optimizer slots and record) - the oldest by last-seen
global step (``TimestampRestrictPolicy``; TFRA used wall-clock time) or the
least often seen (``FrequencyRestrictPolicy``).
"""

from __future__ import annotations

import tensorflow as tf

from ps_toolkit.dynamic_embedding import keys
from ps_toolkit.dynamic_embedding.apply import count_stat
from ps_toolkit.dynamic_embedding.hash_tables import on_device
from ps_toolkit.dynamic_embedding.table import STAT_EVICTED
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
        if table.num_shards == 1:
            return _record_shard(table.shards[0], flat)
        parts = tf.dynamic_partition(flat, keys.shard_of(flat, table.num_shards), table.num_shards)
        return tf.group(*[_record_shard(shard, part) for shard, part in zip(table.shards, parts, strict=True)])

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
            lambda: tf.group(*[evict_shard(shard, keep, self.SCORE_COLUMN) for shard in table.shards]),
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
            return tf.add_n([shard.meta.size() for shard in self.var.table.shards])

    def export(self, name=None) -> tuple[tf.Tensor, tf.Tensor]:
        """(ids, score): the last-seen global step (Timestamp) or the seen-count (Frequency) of each id."""
        with tf.name_scope(name or "status_export"):
            parts = [shard.meta.export() for shard in self.var.table.shards]
            ids = tf.concat([part[0] for part in parts], 0)
            scores = tf.concat([part[1][:, self.score_column] for part in parts], 0)
            return (tf.cast(ids, tf.int32) if self.var.key_dtype == tf.int32 else ids), scores


def _record_shard(shard, ids) -> tf.Operation:
    """On the shard's ps: each of ``ids`` seen once more, last at the global step (0 without one)."""
    step = tf.compat.v1.train.get_global_step()
    admit_after = shard.table.admit_after
    with on_device(shard.device):
        meta = shard.meta.find(ids)
        count = meta[:, _COUNT] + 1
        # An id admitted by this count gets its initial row first, as training admits it: it reads the same.
        due = tf.logical_and(count >= admit_after, meta[:, _COUNT] < admit_after)
        due_ids = tf.boolean_mask(ids, due)
        admitted = shard.rows.insert(due_ids, shard.table.initial_rows(due_ids))
        now = tf.fill(tf.shape(ids), tf.cast(step, tf.int64) if step is not None else tf.constant(0, tf.int64))
        with tf.control_dependencies([admitted]):
            return shard.meta.insert(ids, tf.stack([count, now], 1))


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


def evict_shard(shard, keep: int, score_column: int) -> tf.Operation:
    """On the shard's ps: removes all but the ``keep`` best-scored ids (row, slots, record); counts the evictions."""
    with on_device(shard.device), tf.name_scope("restrict_" + shard.prefix.replace("/", "_")):
        ids, meta = shard.meta.export()
        scores = meta[:, score_column]
        excess = tf.maximum(tf.size(ids) - keep, 0)
        _, lowest = tf.math.top_k(-scores, excess, sorted=False)
        evicted = tf.gather(ids, lowest)
        rows_before = shard.rows.size()
        with tf.control_dependencies([rows_before]):
            removals = [shard.rows.remove(evicted), shard.meta.remove(evicted)]
            removals += [slot.remove(evicted) for slot in shard.slots.values()]
        with tf.control_dependencies(removals):
            return count_stat(shard, STAT_EVICTED, rows_before - shard.rows.size())
