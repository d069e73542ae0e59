"""One hash table on one device, through TensorFlow's core lookup ops (``tf.raw_ops``): no custom op to build.

A ``HashTable`` holds the entries of every table of a group on one ps, keyed
by stored keys (``keys.stored_keys``): int64 pairs [table tag, mixed id] in a
``MutableDenseHashTableV2`` (open addressing, flat key and value arrays), or
tag-prefixed strings in a ``MutableHashTableOfTensorsV2``. Every graph that
names it on the same ps (each worker's, the chief's evaluation and
maintenance graphs) reaches the same table by its shared name, and its ops
are created on the table's device whatever device function is around them.

The dense table's keys are never removed one by one: TensorFlow's dense table
stores a key again after a removal freed a slot earlier in its probe chain, so
an update after a removal can leave two entries for one key. Content is
replaced whole instead (``replace``), built in a scratch table and swapped in
by one import.
"""

from __future__ import annotations

import contextlib

import tensorflow as tf

# Stored int64 keys start with a table tag >= 0 (keys.py): these two pairs are never a stored key.
EMPTY_KEY = (-1, 0)
DELETED_KEY = (-2, 0)
NO_KEY = (-3, 0)  # stands in for a reserved key in a lookup: no entry has it
INITIAL_BUCKETS = 1024  # a power of two; the table doubles when it is 80% full


@contextlib.contextmanager
def on_device(device: str | None):
    """Ops created inside go to ``device`` alone (the enclosing device functions are ignored)."""
    with tf.compat.v1.device(None), tf.compat.v1.device(device):
        yield


def queryable(stored: tf.Tensor, live: tf.Tensor) -> tf.Tensor:
    """An export's keys with every dead one (an empty or deleted bucket) replaced by ``NO_KEY``."""
    if stored.dtype == tf.string:
        return stored
    return tf.where(live[:, None], stored, tf.constant([NO_KEY], tf.int64))


class HashTable:
    """stored key -> value vector of ``width`` on ``device``; absent keys read ``default``.

    Args:
        shared_name: The table's name on its ps (and the prefix of its ops' names).
        key_dtype: tf.int64 (stored keys are [n, 2] pairs) or tf.string.
        value_dtype: The values' dtype.
        width: The length of each value vector.
        default: What an absent key reads (a scalar or a ``width`` vector).
        device: The ps device; None: the local one.
    """

    def __init__(self, shared_name: str, key_dtype, value_dtype, width: int, default, device: str | None):
        self.shared_name, self.device = shared_name, device
        self.key_dtype, self.value_dtype, self.width = key_dtype, value_dtype, width
        self.dense = key_dtype == tf.int64
        with on_device(device), tf.name_scope(shared_name.replace(":", "_")):
            self._default = tf.constant(default, value_dtype, shape=[width])
            self.handle = self._create("table", shared_name)
            self._scratch = self._create("scratch", f"{shared_name}/scratch") if self.dense else None

    def _create(self, name: str, shared_name: str):
        if self.dense:
            return tf.raw_ops.MutableDenseHashTableV2(
                empty_key=tf.constant(EMPTY_KEY, tf.int64),
                deleted_key=tf.constant(DELETED_KEY, tf.int64),
                value_dtype=self.value_dtype,
                value_shape=[self.width],
                initial_num_buckets=INITIAL_BUCKETS,
                shared_name=shared_name,
                use_node_name_sharing=False,
                name=name,
            )
        return tf.raw_ops.MutableHashTableOfTensorsV2(
            key_dtype=tf.string,
            value_dtype=self.value_dtype,
            value_shape=[self.width],
            shared_name=shared_name,
            use_node_name_sharing=False,
            name=name,
        )

    def find(self, stored: tf.Tensor, default=None) -> tf.Tensor:
        """The values of ``stored`` keys, [n, width]; ``default`` (the table's unless given) for the absent."""
        with on_device(self.device):
            if default is None:
                default = self._default
            else:
                default = tf.broadcast_to(tf.cast(default, self.value_dtype), [self.width])
            values = tf.raw_ops.LookupTableFindV2(table_handle=self.handle, keys=stored, default_value=default)
            return tf.ensure_shape(values, [None, self.width])

    def insert(self, stored: tf.Tensor, values: tf.Tensor) -> tf.Operation:
        """Sets the values of ``stored`` keys (added or overwritten)."""
        with on_device(self.device):
            return tf.raw_ops.LookupTableInsertV2(table_handle=self.handle, keys=stored, values=values)

    def size(self) -> tf.Tensor:
        """The number of keys (int64 scalar)."""
        with on_device(self.device):
            return tf.raw_ops.LookupTableSizeV2(table_handle=self.handle)

    def export(self) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """(keys, values, live): the whole table on its device; ``live`` marks the rows that are entries.

        The dense table exports its bucket arrays themselves, empty buckets included and without a
        copy: select with ``live`` (a ``tf.dynamic_partition`` with the dead rows in a part of their
        own copies the values once).
        """
        with on_device(self.device):
            stored, values = tf.raw_ops.LookupTableExportV2(
                table_handle=self.handle, Tkeys=self.key_dtype, Tvalues=self.value_dtype
            )
            values = tf.ensure_shape(values, [None, self.width])
            if not self.dense:
                stored = tf.ensure_shape(stored, [None])
                return stored, values, tf.ones_like(stored, tf.bool)
            stored = tf.ensure_shape(stored, [None, 2])
            return stored, values, stored[:, 0] >= 0

    def replace(self, stored: tf.Tensor, values: tf.Tensor) -> tf.Operation:
        """Replaces the whole content by (stored keys, values), in one step for readers of the table."""
        with on_device(self.device):
            if not self.dense:
                return tf.raw_ops.LookupTableImportV2(table_handle=self.handle, keys=stored, values=values)
            # The dense table imports only its own bucket layout: place the keys in the scratch table,
            # then hand its arrays over, and leave the scratch empty (its arrays are the table's now).
            emptied = self._clear(self._scratch)
            with tf.control_dependencies([emptied]):
                placed = tf.raw_ops.LookupTableInsertV2(table_handle=self._scratch, keys=stored, values=values)
            with tf.control_dependencies([placed]):
                arrays = tf.raw_ops.LookupTableExportV2(
                    table_handle=self._scratch, Tkeys=tf.int64, Tvalues=self.value_dtype
                )
                swapped = _import(self.handle, arrays[0], arrays[1])
            with tf.control_dependencies([swapped]):
                return self._clear(self._scratch)

    def clear(self) -> tf.Operation:
        """Removes every key."""
        with on_device(self.device):
            if not self.dense:
                return tf.raw_ops.LookupTableImportV2(
                    table_handle=self.handle,
                    keys=tf.constant([], tf.string),
                    values=tf.zeros([0, self.width], self.value_dtype),
                )
            return self._clear(self.handle)

    def _clear(self, handle) -> tf.Operation:
        # The table takes the imported arrays as its own and writes into them: they must be new buffers at
        # every run, shared with nothing. TensorFlow folds a fill of constants into one constant (one buffer
        # for every run) and merges equal subgraphs: zeros made from a stateful random op are neither.
        fresh = tf.floor(tf.random.uniform([INITIAL_BUCKETS, 2 + self.width]))  # zeros, new at every run
        empty_keys = tf.cast(fresh[:, :2], tf.int64) + tf.constant([EMPTY_KEY], tf.int64)
        return _import(handle, empty_keys, tf.cast(fresh[:, 2:], self.value_dtype))


def _import(handle, bucket_keys: tf.Tensor, bucket_values: tf.Tensor) -> tf.Operation:
    """A dense table's import of whole bucket arrays ([buckets, 2] keys).

    The import's shape function expects the scalar keys of the other tables: the arrays go in with
    their shapes unknown to it (the kernel checks them against the table).
    """
    return tf.raw_ops.LookupTableImportV2(
        table_handle=handle,
        keys=tf.compat.v1.placeholder_with_default(bucket_keys, shape=None),
        values=tf.compat.v1.placeholder_with_default(bucket_values, shape=None),
    )
