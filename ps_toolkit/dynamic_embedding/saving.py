"""Tables in the chief's checkpoints: each table's rows, meta and slots saved bucket by bucket, re-sharded on restore.

Design: docs/design.md, "Dynamic embedding tables".
"""

from __future__ import annotations

import re
import weakref

import tensorflow as tf

from ps_toolkit.base import tf_internals
from ps_toolkit.dynamic_embedding import keys, restore_routing, shard_records
from ps_toolkit.dynamic_embedding.hash_tables import HashTable, on_device

_SaveableObject, _SaveSpec = tf_internals.saveable_classes()
FILLED = "filled"
# graph -> [(marker handle, its initializer, its is_initialized op)], registered only by require_filled_tables.
_MARKERS_BY_GRAPH = weakref.WeakKeyDictionary()


def register_saveables(group) -> None:
    """Adds to SAVEABLE_OBJECTS a saveable for each hash table of each of ``group``'s shards, now and as slots come.

    Each saveable writes every table of the group under the table's own names, bucket by bucket
    (``checkpoint_name``): one export and one split per hash table, whatever the number of tables.
    """

    def add(shard, component, hash_table):
        tf.compat.v1.add_to_collection(
            tf.compat.v1.GraphKeys.SAVEABLE_OBJECTS, GroupShardSaveable(shard, component, hash_table)
        )

    for shard in group.shards:
        for component, hash_table in shard.components():
            add(shard, component, hash_table)
        shard.on_new_slot(lambda name, hash_table, shard=shard: add(shard, f"slot_{name}", hash_table))


def checkpoint_name(table_name: str, component: str, bucket: int, part: str) -> str:
    """The checkpoint key of one bucket's keys or values."""
    return f"{table_name}/{component}/bucket_{bucket:02d}/{part}"


def bucket_parts(shard, stored, table_index, num_tables: int, *tensors) -> list[list[tf.Tensor]]:
    """Each of ``tensors`` (a row per stored key of ``shard``) split into its parts per (table, owned save bucket).

    Part ``t * len(owned) + b`` holds the rows of table ``t`` in the shard's ``b``-th bucket; rows whose
    ``table_index`` is ``num_tables`` or more (no entry, or not selected) are in no part.
    """
    group = shard.group
    owned = keys.buckets_of_shard(shard.index, group.num_shards)
    hashes = keys.hashes_of(group.key.key_dtype, stored)
    # Every entry of this shard is in one of its buckets, whose position among them is bucket // num_shards.
    position = tf.math.floordiv(keys.save_bucket(hashes), group.num_shards)
    num_parts = num_tables * len(owned)
    part = tf.where(table_index < num_tables, table_index * len(owned) + position, num_parts)
    return [tf.dynamic_partition(tensor, part, num_parts + 1)[:num_parts] for tensor in tensors]


class GroupShardSaveable(_SaveableObject):
    """One hash table of one group shard, saved as each table's save buckets the shard owns.

    The specs are built when a Saver first asks for them, so that they cover every table made
    before the Saver (tables join their group one by one as the model is built).

    Args:
        shard: The GroupShard.
        component: "rows", "meta" or "slot_<name>".
        hash_table: The component's HashTable.
    """

    def __init__(self, shard, component: str, hash_table: HashTable):
        self._shard, self._component, self._hash_table = shard, component, hash_table
        self._specs = None
        self._tables = None
        # Named after the hash table's op: an exported MetaGraph lists the saveables by name as graph elements.
        self.op, self.name = hash_table.handle, hash_table.handle.op.name
        self.filled = filled_marker(hash_table)

    @property
    def specs(self):
        """One keys and one values SaveSpec per table of the group and bucket of the shard."""
        if self._specs is None or len(self._tables) != len(self._shard.group.tables):  # a table joined since
            self._specs = self._build_specs()
        return self._specs

    @specs.setter
    def specs(self, value):
        self._specs = value

    def _build_specs(self) -> list:
        shard = self._shard
        self._tables = list(shard.group.tables)
        owned = keys.buckets_of_shard(shard.index, shard.group.num_shards)
        with (
            on_device(shard.device),
            tf.name_scope(f"save_{shard.prefix}_{self._component}".replace("/", "_")),
            tf.control_dependencies(None),
        ):
            found = shard_records.entries(shard, self._hash_table)
            ids = keys.ids_of(shard.group.key.key_dtype, found.stored)
            id_parts, value_parts = bucket_parts(
                shard, found.stored, found.table_index, len(self._tables), ids, found.values
            )
        specs = []
        for t, table in enumerate(self._tables):
            for b, bucket in enumerate(owned):
                for kind, parts in (("keys", id_parts), ("values", value_parts)):
                    name = checkpoint_name(table.name, self._component, bucket, kind)
                    specs.append(_SaveSpec(parts[t * len(owned) + b], "", name, device=shard.device))
        return specs

    @property
    def device(self):
        """The shard's ps."""
        return self._shard.device

    @property
    def shard(self):
        """The GroupShard saved."""
        return self._shard

    @property
    def component(self) -> str:
        """The component saved: rows, meta or slot_<name>."""
        return self._component

    @property
    def hash_table(self) -> HashTable:
        """The component's HashTable."""
        return self._hash_table

    def restore(self, restored_tensors, restored_shapes=None):
        """Replaces the shard's content by the keys and values of its tables' buckets.

        String ids go through ``restore_routing``: a checkpoint of the older string hash holds them in
        buckets of other shards. Int64 ids are always in the bucket of their hash: each shard restores its own.
        """
        shard, group = self._shard, self._shard.group
        key_dtype, width = group.key.key_dtype, self._hash_table.width
        per_table = 2 * len(keys.buckets_of_shard(shard.index, group.num_shards))
        # The Saver restores the specs it was built with: the group's first tables (tables only join a group).
        tables = group.tables[: len(restored_tensors) // per_table]
        with on_device(shard.device):
            ids, values, tags = [], [], []
            for t, table in enumerate(tables):
                mine = restored_tensors[per_table * t : per_table * (t + 1)]
                table_ids = tf.concat(list(mine[0::2]), 0)
                ids.append(table_ids)
                values.append(tf.concat(list(mine[1::2]), 0))
                tags.append(tf.fill(tf.shape(table_ids), tf.constant(table.tag, tf.int64)))
            ids, values, tags = tf.concat(ids, 0), tf.concat(values, 0), tf.concat(tags, 0)
            check = tf.debugging.assert_equal(
                tf.shape(values, out_type=tf.int64)[1],
                tf.constant(width, tf.int64),
                message=(
                    f"dynamic table {', '.join(t.name for t in tables)} {self._component}: the checkpoint "
                    f"holds values of another shape than the table's [{width}]"
                ),
            )
            if key_dtype == tf.string:
                return restore_routing.routed_restore(self, restored_tensors[0], ids, values, tags, check)
            stored = keys.stored_keys(key_dtype, tags, ids, keys.hash64(ids))
            with tf.control_dependencies([check]):
                replaced = self._hash_table.replace(stored, tf.ensure_shape(values, [None, width]))
            with tf.control_dependencies([replaced]):
                return self.filled.assign(True, read_value=False)


def filled_marker(hash_table: HashTable) -> tf.Variable:
    """The hash table's "filled" marker on its device (set by init and restore; see require_filled_tables)."""
    # Outside any control flow (a slot's table may be made inside the in-graph loop) and under the table's name.
    scope = hash_table.shared_name.replace(":", "_") + "/"
    with tf.control_dependencies(None), on_device(hash_table.device), tf.compat.v1.name_scope(scope):
        marker = tf.compat.v1.Variable(False, trainable=False, collections=[], use_resource=True, name=FILLED)
        is_filled = marker.is_initialized()
    markers = _MARKERS_BY_GRAPH.setdefault(tf.compat.v1.get_default_graph(), [])
    markers.append((marker.handle, marker.initializer, is_filled))
    return marker


def require_filled_tables(graph=None) -> None:
    """Makes a default Scaffold of ``graph`` init every "filled" marker made so far and be ready only once all are set.

    Each marker becomes a shared resource, so the Scaffold's init_op sets it (a fresh model) and its ready ops
    report it unset on a restarted ps until the chief restored the checkpoint. Only the toolkit's own scaffold
    asks for it: a user's Scaffold (say init_op=global_variables_initializer()) keeps TensorFlow's usual checks.

    Args:
        graph: the graph holding the tables (default: the default graph).
    """
    graph = graph or tf.compat.v1.get_default_graph()
    with graph.as_default():
        for handle, initializer, is_filled in _MARKERS_BY_GRAPH.pop(graph, []):
            tf_internals.register_shared_resource(handle, initializer, is_filled)


_KEY = re.compile(r"^(?P<table>.+)/(?P<component>rows|meta|slot_[^/]+)/bucket_\d\d/(?P<part>keys|values)$")


def checkpoint_differences(saved: dict, tables) -> tuple[list[str], set]:
    """(differences between a checkpoint's tables and ``tables``, the checkpoint keys that are tables').

    A difference is a table of the model the checkpoint lacks, a table of the
    checkpoint the model lacks, or rows (or slots) of another dim.

    Args:
        saved: Checkpoint key -> shape, as a checkpoint reader's ``get_variable_to_shape_map`` gives them.
        tables: The model's DynamicTables.

    Returns:
        (one line per difference, the checkpoint keys that belong to tables).
    """
    by_name = {table.name: table for table in tables}
    differences, consumed, seen = [], set(), set()
    for key, shape in sorted(saved.items()):
        match = _KEY.match(key)
        if not match:
            continue
        consumed.add(key)
        name, component = match["table"], match["component"]
        seen.add(name)
        table = by_name.get(name)
        if table is None:
            differences.append(f"the checkpoint's dynamic table {name} is not in the model")
        elif match["part"] == "values" and component != "meta" and list(shape[1:]) != [table.dim]:
            differences.append(
                f"dynamic table {name} has rows of dim {table.dim}; the checkpoint's {component} have {shape[1:]}"
            )
    differences += [
        f"the model's dynamic table {name} is not in the checkpoint" for name in by_name if name not in seen
    ]
    return sorted(set(differences)), consumed
