"""One hash table on one device, through TensorFlow's core lookup ops (``tf.raw_ops``): no custom op to build.

A ``HashTable`` is a ``MutableHashTableOfTensors`` resource with an explicit
shared name, so every worker's graph (and the chief's evaluation and
maintenance graphs) that names it on the same ps reaches the same table.
Its ops are created on the table's device, whatever device function is in
effect around them.
"""

from __future__ import annotations

import contextlib

import tensorflow as tf


@contextlib.contextmanager
def on_device(device: str | None):
    """Ops created inside go to ``device`` alone (the enclosing device functions are ignored)."""
    with tf.compat.v1.device(None), tf.compat.v1.device(device):
        yield


class HashTable:
    """key -> value (a vector of ``value_shape``) on ``device``; missing keys read ``default``."""

    def __init__(self, shared_name: str, key_dtype, value_dtype, value_shape, default, device: str | None):
        self.shared_name = shared_name
        self.key_dtype, self.value_dtype = key_dtype, value_dtype
        self.value_shape = tf.TensorShape(value_shape)
        self.device = device
        with on_device(device), tf.name_scope(shared_name.replace(":", "_")):
            self.handle = tf.raw_ops.MutableHashTableOfTensorsV2(
                key_dtype=key_dtype,
                value_dtype=value_dtype,
                value_shape=self.value_shape,
                shared_name=shared_name,
                use_node_name_sharing=False,
                name="table",
            )
            self._default = tf.constant(default, value_dtype, shape=self.value_shape)

    def find(self, ids: tf.Tensor) -> tf.Tensor:
        """Values of ``ids`` ([n] + value_shape); ``default`` for the ones absent."""
        with on_device(self.device):
            values = tf.raw_ops.LookupTableFindV2(table_handle=self.handle, keys=ids, default_value=self._default)
            return tf.ensure_shape(values, tf.TensorShape([None]).concatenate(self.value_shape))

    def insert(self, ids: tf.Tensor, values: tf.Tensor) -> tf.Operation:
        with on_device(self.device):
            return tf.raw_ops.LookupTableInsertV2(table_handle=self.handle, keys=ids, values=values)

    def remove(self, ids: tf.Tensor) -> tf.Operation:
        with on_device(self.device):
            return tf.raw_ops.LookupTableRemoveV2(table_handle=self.handle, keys=ids)

    def size(self) -> tf.Tensor:
        """The number of keys (int64 scalar)."""
        with on_device(self.device):
            return tf.raw_ops.LookupTableSizeV2(table_handle=self.handle)

    def export(self) -> tuple[tf.Tensor, tf.Tensor]:
        """(keys, values): a copy of the whole table, made on its device."""
        with on_device(self.device):
            ids, values = tf.raw_ops.LookupTableExportV2(
                table_handle=self.handle, Tkeys=self.key_dtype, Tvalues=self.value_dtype
            )
            return tf.ensure_shape(ids, [None]), tf.ensure_shape(values, [None, *self.value_shape.as_list()])

    def replace(self, ids: tf.Tensor, values: tf.Tensor) -> tf.Operation:
        """Replaces the whole content by (ids, values)."""
        with on_device(self.device):
            return tf.raw_ops.LookupTableImportV2(table_handle=self.handle, keys=ids, values=values)
