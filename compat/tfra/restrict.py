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

from ps_toolkit.dynamic_embedding import eviction, shard_records
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
        raise refused.NotServedUseError(
            f"{type(self).__name__}.apply_update: the tables count and time-stamp the ids of every training step "
            "themselves (DynamicEmbeddingOptimizer)"
        )

    @property
    def status(self):
        raise errors.not_served_member(type(self).__name__, "status")

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
