"""A group shard in a delta checkpoint: the entries changed since a base step, and the ids kept from the base.

A delta is written against a base step S (that of the whole checkpoint it builds on). On each
group shard's ps one export of the meta splits the shard's ids into the changed (last seen at
step S or later) and the kept (known to the shard, last seen before S: their entries are the
whole checkpoint's); the rows and each slot are exported once each and filtered by their ids'
meta, read on the same ps. Nothing is tracked on a step's path: the meta every step writes
already holds each id's last-seen step.

Checkpoint keys: the whole checkpoint's for the changed entries
(``<table>/<rows|meta|slot_NAME>/bucket_NN/{keys,values}``), and ``<table>/kept/bucket_NN/keys``
for the kept ids. An id of the whole checkpoint that is neither kept nor changed was evicted
since: the kept list stands for the tombstones (8 bytes per int64 id). The names do not depend
on the number of ps, so a delta restores into any number of shards, as a whole checkpoint does.

A restore comes after the whole checkpoint's: the shard's meta becomes the kept ids' (read from
the whole) plus the delta's; its rows and slots keep the whole's entries of kept ids, and the
delta's are written over them.
"""

from __future__ import annotations

import tensorflow as tf

from ps_toolkit.base import tf_internals
from ps_toolkit.dynamic_embedding import hash_tables, keys, shard_records
from ps_toolkit.dynamic_embedding.hash_tables import on_device
from ps_toolkit.dynamic_embedding.saving import bucket_parts, checkpoint_name

_SaveableObject, _SaveSpec = tf_internals.saveable_classes()
KEPT = "kept"


class DeltaShardSaveable(_SaveableObject):
    """Every hash table of one group shard (rows, meta, slots) in a delta against ``base_step``.

    Args:
        shard: The GroupShard (its slots are those made so far: build after the optimizer).
        base_step: int64 scalar tensor, the base step S (fed at each save and restore).
    """

    def __init__(self, shard, base_step: tf.Tensor):
        self._shard, self._base_step = shard, base_step
        self._tables = list(shard.group.tables)
        self._components = shard.components()
        # What each spec is, in order: (component, table index, "keys" | "values").
        self._roles = []
        specs = self._build_specs()
        super().__init__(shard.rows.handle, specs, f"{shard.prefix}/delta")

    def _build_specs(self) -> list:
        shard = self._shard
        key_dtype = shard.group.key.key_dtype
        owned = keys.buckets_of_shard(shard.index, shard.group.num_shards)
        num_tables = len(self._tables)
        specs = []

        def add(component: str, id_parts, value_parts=None):
            for t, table in enumerate(self._tables):
                for b, bucket in enumerate(owned):
                    pairs = [("keys", id_parts)] + ([("values", value_parts)] if value_parts is not None else [])
                    for kind, parts in pairs:
                        name = checkpoint_name(table.name, component, bucket, kind)
                        specs.append(_SaveSpec(parts[t * len(owned) + b], "", name, device=shard.device))
                        self._roles.append((component, t, kind))

        with (
            on_device(shard.device),
            tf.name_scope(f"delta_{shard.prefix}".replace("/", "_")),
            tf.control_dependencies(None),
        ):
            meta = shard_records.entries(shard, shard.meta)
            changed = meta.values[:, 1] >= self._base_step
            ids = keys.ids_of(key_dtype, meta.stored)
            changed_index = tf.where(changed, meta.table_index, num_tables)
            kept_index = tf.where(changed, num_tables, meta.table_index)
            add("meta", *bucket_parts(shard, meta.stored, changed_index, num_tables, ids, meta.values))
            add(KEPT, *bucket_parts(shard, meta.stored, kept_index, num_tables, ids))
            for component, hash_table in self._components:
                if component == "meta":
                    continue
                found = shard_records.entries(shard, hash_table)
                live = found.table_index < num_tables
                last_seen = shard.meta.find(hash_tables.queryable(found.stored, live))[:, 1]
                index = tf.where(tf.logical_and(live, last_seen >= self._base_step), found.table_index, num_tables)
                found_ids = keys.ids_of(key_dtype, found.stored)
                add(component, *bucket_parts(shard, found.stored, index, num_tables, found_ids, found.values))
        return specs

    @property
    def device(self):
        """The shard's ps."""
        return self._shard.device

    def restore(self, restored_tensors, restored_shapes=None):
        """Merges the delta into the shard's content, which holds the base whole checkpoint."""
        shard = self._shard
        key_dtype = shard.group.key.key_dtype
        with on_device(shard.device):
            parts = {}
            for (component, t, kind), tensor in zip(self._roles, restored_tensors, strict=True):
                parts.setdefault(component, {}).setdefault(kind, []).append(tensor)
                if kind == "keys":
                    tag = tf.constant(self._tables[t].tag, tf.int64)
                    parts[component].setdefault("tags", []).append(tf.fill(tf.shape(tensor), tag))

            def stored_of(component):
                ids, tags = tf.concat(parts[component]["keys"], 0), tf.concat(parts[component]["tags"], 0)
                return keys.stored_keys(key_dtype, tags, ids, keys.hash64(ids))

            def values_of(component, width):
                return tf.ensure_shape(tf.concat(parts[component]["values"], 0), [None, width])

            kept = stored_of(KEPT)
            kept_meta = shard.meta.find(kept)
            in_base = kept_meta[:, 0] > 0  # a kept id the whole checkpoint lacks has no entry to keep
            merged_meta = shard.meta.replace(
                tf.concat([tf.boolean_mask(kept, in_base), stored_of("meta")], 0),
                tf.concat([tf.boolean_mask(kept_meta, in_base), values_of("meta", 2)], 0),
            )
            merged = [merged_meta]
            with tf.control_dependencies([merged_meta]):
                for component, hash_table in self._components:
                    if component != "meta":
                        merged.append(
                            self._merge(hash_table, stored_of(component), values_of(component, hash_table.width))
                        )
            return tf.group(*merged)

    def _merge(self, hash_table, delta_stored: tf.Tensor, delta_values: tf.Tensor) -> tf.Operation:
        """Keeps the entries of ``hash_table`` whose ids the merged meta marks kept, then writes the delta's."""
        stored, values, live = hash_table.export()
        meta = self._shard.meta.find(hash_tables.queryable(stored, live))
        keep = tf.logical_and(tf.logical_and(live, meta[:, 0] > 0), meta[:, 1] < self._base_step)
        kept = hash_table.replace(tf.boolean_mask(stored, keep), tf.boolean_mask(values, keep))
        with tf.control_dependencies([kept]):
            return hash_table.insert(delta_stored, delta_values)
