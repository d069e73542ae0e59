"""TFRA's ``initializer`` argument (a number, a vector, a TF or Keras initializer) as the rows a table starts from.

TFRA drew a fresh random row for an unseen id at every lookup. Here the common
initializers become a pure function of the id (ps_toolkit's InitialRows), so
an id reads the same row on every worker and in the exported model: normal
(``RandomNormal``, ``random_normal_initializer``), truncated normal, uniform,
zeros, ones and constants keep their parameters. Any other initializer
is called per lookup with shape [ids, dim], as TFRA did; its rows are then
random per lookup, not per id. A VarianceScaling one (Glorot, He), which needs a
static shape, draws as TFRA 0.7.2 did: [ids, dim] with fans from that shape.
"""

from __future__ import annotations

import dataclasses
import math
import zlib

import numpy as np
import tensorflow as tf

from ps_toolkit.dynamic_embedding.initial_rows import InitialRows, group_rows
from ps_toolkit_compat.tfra.refused import NotServedUseError

_NORMAL = ("RandomNormal",)
_TRUNCATED = ("TruncatedNormal",)
_UNIFORM = ("RandomUniform",)
_ZEROS = ("Zeros", "Zero", "zeros")
_ONES = ("Ones", "One", "ones")
_CONSTANT = ("Constant",)
_TRUNCATE_AT = 2.0  # TruncatedNormal redraws values beyond 2 stddev


@dataclasses.dataclass(frozen=True)
class ShiftedRows(InitialRows):
    """``multiplier * draw + shift`` of the id-seeded draw of ``InitialRows``, or a constant ``vector``."""

    multiplier: float = 1.0
    shift: float = 0.0
    vector: tuple | None = None

    def rows(self, ids: tf.Tensor, dim: int, dtype: tf.DType) -> tf.Tensor:
        if self.vector is not None:
            return tf.tile(tf.constant(self.vector, dtype, shape=[1, dim]), tf.stack([tf.size(ids), 1]))
        return tf.cast(super().rows(ids, dim, tf.float64) * self.multiplier + self.shift, dtype)

    @classmethod
    def rows_of_group(cls, initializers, table_index, hashes, dim, dtype):
        """The rows of several tables' ids at once: the same values as each table's ``rows``."""
        if any(i.vector is not None for i in initializers) or len({i.distribution for i in initializers}) != 1:
            return None
        draw = group_rows(initializers, table_index, hashes, dim, tf.float64)
        return tf.cast(
            draw * _per_id(initializers, "multiplier", table_index) + _per_id(initializers, "shift", table_index), dtype
        )


@dataclasses.dataclass(frozen=True)
class TruncatedRows(InitialRows):
    """A normal truncated at 2 stddev, id-seeded: the inverse normal CDF of a uniform over the kept range."""

    mean: float = 0.0
    stddev: float = 1.0

    def rows(self, ids: tf.Tensor, dim: int, dtype: tf.DType) -> tf.Tensor:
        edge = 0.5 * math.erfc(_TRUNCATE_AT / math.sqrt(2.0))  # P(Z < -2)
        half_open = (super().rows(ids, dim, tf.float64) + 1.0) / 2.0  # uniform in (0, 1)
        normal = tf.math.ndtri(edge + half_open * (1.0 - 2.0 * edge))
        return tf.cast(self.mean + self.stddev * normal, dtype)

    @classmethod
    def rows_of_group(cls, initializers, table_index, hashes, dim, dtype):
        """The rows of several tables' ids at once: the same values as each table's ``rows``."""
        if len({i.distribution for i in initializers}) != 1:
            return None
        edge = 0.5 * math.erfc(_TRUNCATE_AT / math.sqrt(2.0))
        half_open = (group_rows(initializers, table_index, hashes, dim, tf.float64) + 1.0) / 2.0
        normal = tf.math.ndtri(edge + half_open * (1.0 - 2.0 * edge))
        mean, stddev = (_per_id(initializers, name, table_index) for name in ("mean", "stddev"))
        return tf.cast(mean + stddev * normal, dtype)


@dataclasses.dataclass(frozen=True)
class CalledRows(InitialRows):
    """An initializer TFRA called per lookup with shape [ids, dim]; called the same way here."""

    initializer: object = None

    def rows(self, ids: tf.Tensor, dim: int, dtype: tf.DType) -> tf.Tensor:
        if all(hasattr(self.initializer, name) for name in ("scale", "mode", "distribution")):
            return tf.cast(_variance_scaled(self.initializer, ids, dim), dtype)
        try:
            return tf.cast(self.initializer(tf.stack([tf.size(ids), dim]), dtype=dtype), dtype)
        except (TypeError, ValueError):
            # One whose scale needs a static shape (Glorot, He, VarianceScaling: fans from len(shape)): as TFRA
            # fell back to, one row of [dim] drawn per lookup, read by every id of that lookup.
            row = tf.cast(self.initializer([dim], dtype=dtype), dtype)
            return tf.tile(row[None, :], tf.stack([tf.size(ids), 1]))


# The stddev of a normal truncated at two stddevs, as a share of the untruncated one (TF's VarianceScaling).
_TRUNCATED_STDDEV = 0.87962566103423978


def _variance_scaled(initializer, ids: tf.Tensor, dim: int) -> tf.Tensor:
    """[ids, dim] float32 drawn as ``initializer`` (Glorot, He, VarianceScaling) draws a [ids, dim] variable.

    Its fans come from the ids read now (fan_in) and ``dim`` (fan_out), as TFRA 0.7.2 drew them for the ids
    of each shard read; the initializer itself needs a static shape, which a lookup's ids do not have.
    """
    count = tf.cast(tf.size(ids), tf.float32)
    fans = {"fan_in": count, "fan_out": tf.constant(float(dim)), "fan_avg": (count + dim) / 2.0}
    variance = float(initializer.scale) / tf.maximum(1.0, fans[initializer.mode])
    shape = tf.stack([tf.size(ids), dim])
    if initializer.distribution == "uniform":
        limit = tf.sqrt(3.0 * variance)
        return tf.random.uniform(shape, -limit, limit)
    if initializer.distribution == "truncated_normal":
        return tf.random.truncated_normal(shape, stddev=tf.sqrt(variance) / _TRUNCATED_STDDEV)
    return tf.random.normal(shape, stddev=tf.sqrt(variance))  # "normal", "untruncated_normal"


def _per_id(initializers, field: str, table_index: tf.Tensor) -> tf.Tensor:
    """[ids, 1] float64: each id's table's ``field``."""
    values = tf.constant([float(getattr(i, field)) for i in initializers], tf.float64)
    return tf.gather(values, table_index)[:, None]


def _constant_rows(value: float) -> ShiftedRows:
    return ShiftedRows("constant", float(value))


def table_seed(seed, table_name: str) -> int:
    """The initializer's own seed, or one from the table's name, so tables sharing ids start apart."""
    return int(seed) if seed is not None else zlib.crc32(table_name.encode("utf-8"))


def _constant(value, dim: int):
    """A number, or a vector of ``dim`` values; anything else TFRA reduced to its first element."""
    array = np.asarray(value, dtype=np.float64).reshape(-1)
    if array.size == dim:
        return ShiftedRows("constant", 0.0, vector=tuple(array.tolist()))
    return _constant_rows(array[0] if array.size else 0.0)


def rows_for(initializer, dim: int, table_name: str):
    """The table initializer (anything with ``rows(ids, dim, dtype)``) standing in for TFRA's ``initializer``."""
    if initializer is None:
        return _constant_rows(0.0)  # TFRA's default: zero rows
    if isinstance(initializer, (bool, int, float, np.number)):
        return _constant_rows(initializer)
    if isinstance(initializer, (list, tuple, np.ndarray)):
        return _constant(initializer, dim)
    if isinstance(initializer, tf.Tensor):
        value = tf.get_static_value(initializer)
        if value is None:
            raise NotServedUseError(f"initializer {initializer.name}: a tensor computed in the graph is not served")
        return _constant(value, dim)
    kind = type(initializer).__name__
    seed = table_seed(getattr(initializer, "seed", None), table_name)
    if kind in _ZEROS:
        return _constant_rows(0.0)
    if kind in _ONES:
        return _constant_rows(1.0)
    if kind in _CONSTANT:
        return _constant(initializer.value, dim)
    if kind in _NORMAL:
        return ShiftedRows("normal", 1.0, seed, float(initializer.stddev), float(initializer.mean))
    if kind in _TRUNCATED:
        return TruncatedRows("uniform", 1.0, seed, float(initializer.mean), float(initializer.stddev))
    if kind in _UNIFORM:
        low = float(initializer.minval)
        high = 1.0 if initializer.maxval is None else float(initializer.maxval)
        return ShiftedRows("uniform", 1.0, seed, (high - low) / 2.0, (high + low) / 2.0)
    if callable(initializer) and hasattr(initializer, "get_config"):
        return CalledRows("constant", 0.0, initializer=initializer)
    if callable(initializer):  # a plain function: TFRA took what it returns as the constant row
        try:
            return _constant(initializer(shape=[1]), dim)
        except TypeError:
            return _constant(initializer(), dim)
    raise TypeError(f"initializer {initializer!r} is neither a number, a vector nor an initializer")
