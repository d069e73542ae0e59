"""Optimizer slots for rows written by ``Variable.upsert``/``accum``: their initial values before the first update.

A row written by ``upsert`` has no optimizer slot yet (the slots are made when
the optimizer is first built, often after the upsert ran), and the tables'
update reads an existing row's absent slot as 0. For the optimizers whose
slots start elsewhere (Adagrad's accumulator, RMSProp's mean square, Ftrl's
accumulator...) that is another optimizer than TF's. So, in a graph where a
Variable was upserted, each training step first gives the step's ids that
have a row but no slot entry the slot's initial value, as TF's optimizer
starts a new variable's slot.
"""

from __future__ import annotations

import weakref

import tensorflow as tf

from ps_toolkit.dynamic_embedding import keys, table_ops
from ps_toolkit.dynamic_embedding.hash_tables import on_device

# graph -> names of the tables upserted in it.
_UPSERTED = weakref.WeakKeyDictionary()


def mark_upserted(table) -> None:
    _UPSERTED.setdefault(tf.compat.v1.get_default_graph(), set()).add(table.name)


def slot_fills(rule, table_pairs) -> list:
    """The ops giving the step's upserted ids their slots' initial values; none where nothing was upserted."""
    upserted = _UPSERTED.get(tf.compat.v1.get_default_graph(), set())
    started = {name: initial for name, initial in rule.slots.items() if initial}
    fills = []
    for _, rows in table_pairs:
        record = getattr(rows, "record", None)  # the sync path's per-shard pairs carry their rows already merged
        if record is None or record.table.name not in upserted or not started:
            continue
        table = record.table
        ids = tf.boolean_mask(record.unique_ids, table_ops.contains(table, record.unique_ids))
        parts = (
            [ids]
            if table.num_shards == 1
            else tf.dynamic_partition(ids, keys.shard_of(ids, table.num_shards), table.num_shards)
        )
        for shard, shard_ids in zip(table.shards, parts, strict=True):
            fills += [_fill_shard(shard.slot(name), shard_ids, initial, table) for name, initial in started.items()]
    return fills


def _fill_shard(slot, ids, initial: float, table) -> tf.Operation:
    with on_device(slot.device):
        absent = tf.fill([table.dim], tf.constant(float("nan"), table.value_dtype))
        values = tf.raw_ops.LookupTableFindV2(table_handle=slot.handle, keys=ids, default_value=absent)
        missing = tf.math.is_nan(values[:, 0])
        new_ids = tf.boolean_mask(ids, missing)
        return slot.insert(
            new_ids, tf.fill(tf.stack([tf.size(new_ids), table.dim]), tf.cast(initial, table.value_dtype))
        )
