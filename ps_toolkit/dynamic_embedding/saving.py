"""Tables in the chief's checkpoints: each shard's rows, meta and slots saved bucket by bucket, re-sharded on restore.

Design: docs/design.md, "Dynamic embedding tables".
"""

from __future__ import annotations

import re
import weakref

import tensorflow as tf

from ps_toolkit.base import tf_internals
from ps_toolkit.dynamic_embedding import keys
from ps_toolkit.dynamic_embedding.hash_tables import HashTable, on_device

_SaveableObject, _SaveSpec = tf_internals.saveable_classes()
FILLED = "filled"
# graph -> [(marker handle, its initializer, its is_initialized op)], registered only by require_filled_tables.
_MARKERS_BY_GRAPH = weakref.WeakKeyDictionary()


def register_saveables(table) -> None:
    """Adds a saveable for each of ``table``'s hash tables, now and as slots are made, to SAVEABLE_OBJECTS.

    A shard's components are exported one after the other (each export waits for the previous
    component's buckets to be read), so the ps holds one whole export copy at a time, not one per component.
    """
    split_of_last = {}  # shard prefix -> the ops that read its last registered component's buckets

    def add(shard, component, hash_table):
        saveable = ShardComponentSaveable(shard, component, hash_table, after=split_of_last.get(shard.prefix, ()))
        split_of_last[shard.prefix] = saveable.split_ops
        tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.SAVEABLE_OBJECTS, saveable)

    table.add_component_listener(add)


def checkpoint_name(table_name: str, component: str, bucket: int, part: str) -> str:
    """The checkpoint key of one bucket's keys or values."""
    return f"{table_name}/{component}/bucket_{bucket:02d}/{part}"


class ShardComponentSaveable(_SaveableObject):
    """One hash table of one shard, saved as the save buckets the shard owns.

    Args:
        shard: The TableShard.
        component: "rows", "meta" or "slot_<name>".
        hash_table: The component's HashTable.
        after: Ops the export waits for (the shard's previous component's split): one export copy at a time.
    """

    def __init__(self, shard, component: str, hash_table: HashTable, after=()):
        table = shard.table
        self._hash_table, self._table_name, self._component = hash_table, table.name, component
        self._dim_shape = hash_table.value_shape
        owned = keys.buckets_of_shard(shard.index, table.num_shards)
        with (
            on_device(shard.device),
            tf.name_scope(f"save_{shard.prefix}_{component}".replace("/", "_")),
            # Out of any loop or step the component was first made in: the save runs on its own.
            tf.control_dependencies(None),
            tf.control_dependencies(list(after)),
        ):
            # Only the keys of the export are used: its values copy is freed as soon as it is made, and each
            # bucket's values are read from the table by key, so the values are held once (for the write).
            ids, _ = hash_table.export()
            # Every key of this shard is in one of its buckets, whose position among them is bucket // num_shards.
            position = tf.math.floordiv(keys.save_bucket(keys.hash64(ids)), table.num_shards)
            id_parts = tf.dynamic_partition(ids, position, len(owned))
            value_parts = [hash_table.find(part) for part in id_parts]
        self.split_ops = tuple(part.op for part in value_parts)
        specs = []
        for bucket, id_part, value_part in zip(owned, id_parts, value_parts, strict=True):
            specs.append(
                _SaveSpec(id_part, "", checkpoint_name(table.name, component, bucket, "keys"), device=shard.device)
            )
            specs.append(
                _SaveSpec(value_part, "", checkpoint_name(table.name, component, bucket, "values"), device=shard.device)
            )
        # Named after the hash table's op: an exported MetaGraph lists the saveables by name as graph elements.
        super().__init__(hash_table.handle, specs, hash_table.handle.op.name)
        self.filled = filled_marker(hash_table)

    def restore(self, restored_tensors, restored_shapes=None):
        """Replaces the shard's content by the keys and values of its buckets."""
        with on_device(self._hash_table.device):
            ids = tf.concat(list(restored_tensors[0::2]), 0)
            values = tf.concat(list(restored_tensors[1::2]), 0)
            row_shape = tf.shape(values, out_type=tf.int64)[1:]
            check = tf.debugging.assert_equal(
                row_shape,
                tf.constant(self._dim_shape.as_list(), tf.int64),
                message=(
                    f"dynamic table {self._table_name} {self._component}: the checkpoint holds values of another "
                    f"shape than the table's {self._dim_shape.as_list()}"
                ),
            )
            with tf.control_dependencies([check]):
                replaced = self._hash_table.replace(ids, values)
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
