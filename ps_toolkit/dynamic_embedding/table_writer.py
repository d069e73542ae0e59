"""Writing dynamic tables' rows into a new checkpoint, in the tables' own format, without a model.

Each table's ids are sorted by save bucket (``keys.save_bucket(keys.hash64(id))``,
as the tables' saves place them) and every component (rows, meta, each slot)
is written as ``saving.checkpoint_name(table, component, bucket, keys|values)``
by one SaveV2, the Saver's own op. A table's arrays are fed whole, once, and
split into buckets in the graph: the graph holds a few ops per table, not one
per bucket tensor.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

from ps_toolkit.dynamic_embedding import keys
from ps_toolkit.dynamic_embedding.saving import checkpoint_name


@dataclasses.dataclass(frozen=True)
class TableRows:
    """One dynamic table to write: its ids (int64, or bytes for string keys) and each component's values.

    ``components``: "rows", "meta" and "slot_<name>" -> values, one row per id.
    """

    name: str
    ids: np.ndarray
    key_dtype: tf.DType
    components: dict

    def checkpoint_names(self) -> list[str]:
        """Every checkpoint key this table is written under."""
        return [
            checkpoint_name(self.name, component, bucket, part)
            for component in self.components
            for bucket in range(keys.NUM_SAVE_BUCKETS)
            for part in ("keys", "values")
        ]


def save_buckets(ids: np.ndarray, key_dtype: tf.DType) -> np.ndarray:
    """The save bucket of each id, as the tables compute it."""
    with tf.Graph().as_default() as graph:
        fed = tf.compat.v1.placeholder(key_dtype, [None])
        buckets = keys.save_bucket(keys.hash64(fed))
        with tf.compat.v1.Session(graph=graph) as session:
            return session.run(buckets, {fed: ids})


def write(prefix: str, tables: list[TableRows], variables: dict) -> None:
    """Writes ``tables`` bucket by bucket, and ``variables`` (name -> array) as they are, at ``prefix``."""
    names, tensors, feed = [], [], {}

    def fed(value):
        value = np.asarray(value)
        dtype = tf.string if value.dtype.kind in "OSU" else tf.as_dtype(value.dtype)
        placeholder = tf.compat.v1.placeholder(dtype, value.shape)
        feed[placeholder] = value
        return placeholder

    with tf.Graph().as_default() as graph:
        for table in tables:
            buckets = save_buckets(table.ids, table.key_dtype)
            order = np.argsort(buckets, kind="stable")
            counts = np.bincount(buckets, minlength=keys.NUM_SAVE_BUCKETS).tolist()
            bucket_ids = tf.split(fed(table.ids[order]), counts)
            for component, values in table.components.items():
                bucket_values = tf.split(fed(values[order]), counts)
                for bucket in range(keys.NUM_SAVE_BUCKETS):
                    names += [checkpoint_name(table.name, component, bucket, part) for part in ("keys", "values")]
                    tensors += [bucket_ids[bucket], bucket_values[bucket]]
        for name, value in sorted(variables.items()):
            names.append(name)
            tensors.append(fed(value))
        save = tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names), tensors=tensors)
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(save, feed)
