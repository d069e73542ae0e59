"""Rows of the next step's ids pulled during this step's compute: one step of staleness on them.

Design: docs/design.md, "Prefetching the next step's rows".
"""

from __future__ import annotations

import tensorflow as tf

from ps_toolkit.training import sparse_lookup

_LOCAL = [tf.compat.v1.GraphKeys.LOCAL_VARIABLES]


def _local_variable(name: str, dtype, shape) -> tf.Variable:
    # Replica-local: a worker's cache of rows, never saved, never shared with another replica.
    return tf.compat.v1.Variable(
        tf.zeros(shape, dtype),
        trainable=False,
        collections=_LOCAL,
        validate_shape=False,
        shape=tf.TensorShape(None),
        name=name,
    )


class PrefetchedRows:
    """One table's rows for the batch this step computes, pulled from the ps one run earlier.

    A run computes on the cached rows of its batch (``rows()``), pushes their
    gradients to the ids they belong to (``gradients``), and, overlapping the
    compute, pulls the rows of the next batch's ids into the cache
    (``refresh``). The caller orders the pull before this run's push, so the rows a
    step computes on are the table as it was before the previous step's push:
    exactly one step (of this replica) stale.
    """

    def __init__(self, table, dim: int, name: str = "prefetched_rows"):
        """Makes the cache (replica-local variables, empty until ``refresh`` runs).

        Args:
            table: A variable, or a partitioned variable / list of parts on the ps.
            dim: The table's row width.
            name: Prefix of the cache variables' names.
        """
        self.table, self.dim = table, dim
        self.parts = sparse_lookup.table_parts(table)
        self._keys = _local_variable(f"{name}/keys", tf.int64, [0])
        self._positions = _local_variable(f"{name}/positions", tf.int32, [0])
        self._ids_shape = _local_variable(f"{name}/ids_shape", tf.int32, [1])
        self._rows = _local_variable(f"{name}/rows", tf.float32, [0, dim])
        self._reads: list[tf.Tensor] = []
        self._cached_rows = None

    def rows(self) -> tf.Tensor:
        """The cached rows of the batch computed now, shaped ``ids.shape + [dim]``; differentiable."""
        keys_rows = tf.reshape(self._rows.read_value(), [-1, self.dim])
        positions = self._positions.read_value()
        shape = self._ids_shape.read_value()
        self._cached_rows = keys_rows
        self._reads += [keys_rows, positions, shape]
        rows = tf.gather(keys_rows, positions)
        return tf.reshape(rows, tf.concat([shape, [self.dim]], 0))

    def gradients(self, loss: tf.Tensor) -> list[tuple]:
        """(gradient, part) pairs pushing ``loss``'s gradient on the cached rows to their ids.

        Args:
            loss: The step's loss, computed from ``rows()``.

        Returns:
            One ``(tf.IndexedSlices, part variable)`` pair per part of the table.
        """
        (grad,) = tf.gradients(loss, [self._cached_rows])
        keys = self._keys.read_value()
        self._reads.append(keys)
        pieces = _split_keys(self.parts, keys)
        return [
            (tf.IndexedSlices(tf.gather(grad, where), local, tf.shape(part, out_type=tf.int64)), part)
            for part, local, where in pieces
        ]

    def refresh(self, next_ids: tf.Tensor, wire_dtype: str = "float32") -> tuple[tf.Operation, tf.Tensor]:
        """Pulls the rows of ``next_ids`` and, once this run's reads of the cache are done, caches them.

        Args:
            next_ids: The ids of the batch the next run computes on.
            wire_dtype: How the rows travel (``sparse_lookup.WIRE_DTYPES``).

        Returns:
            The op that fills the cache (run one once before the first step too), and the pulled
            rows: this run's push must depend on them, so the next step's rows predate it.
        """
        lookup = sparse_lookup.TableLookup(self.table, tf.convert_to_tensor(next_ids), unique=True)
        lookup.fetch_alone(wire_dtype)
        with tf.control_dependencies(self._reads + [lookup.rows]):
            fill = tf.group(
                self._keys.assign(tf.cast(lookup.keys, tf.int64), read_value=False),
                self._positions.assign(lookup.positions, read_value=False),
                self._ids_shape.assign(tf.shape(lookup.ids, out_type=tf.int32), read_value=False),
                self._rows.assign(lookup.rows, read_value=False),
            )
        return fill, lookup.rows


def _split_keys(parts: list[tuple], keys: tf.Tensor) -> list[tuple]:
    """(part, ids local to it, positions among ``keys``) for each part of a table."""
    if len(parts) == 1:
        return [(parts[0][0], keys, tf.range(tf.size(keys, out_type=tf.int32)))]
    starts = tf.constant([start for _, start in parts], tf.int64)
    owner = tf.searchsorted(starts[1:], keys, side="right", out_type=tf.int32)
    local = keys - tf.gather(starts, owner)
    count = len(parts)
    locals_ = tf.dynamic_partition(local, owner, count)
    where = tf.dynamic_partition(tf.range(tf.size(keys, out_type=tf.int32)), owner, count)
    return [(part, ids, at) for (part, _), ids, at in zip(parts, locals_, where, strict=True)]
