"""The row an id reads before it was ever trained: a pure function of (id, column, seed), so every replica agrees.

No random op and no per-id state: the id's 64-bit hash is mixed with the
column's index and the seed (splitmix64), and the bits are mapped to a
uniform in [-scale, scale] or a normal of stddev ``scale`` (Box-Muller on two
such draws). The same id gets the same row on every worker, on every ps, in
every restart and in the exported model.
"""

from __future__ import annotations

import dataclasses
import math

import tensorflow as tf

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.dynamic_embedding import keys

DISTRIBUTIONS = ("normal", "uniform", "constant")
_SALT_SECOND_DRAW = 0x5851F42D4C957F2D


@dataclasses.dataclass(frozen=True)
class InitialRows:
    """How rows never trained are initialised.

    Attributes:
        distribution: "normal" (stddev ``scale``), "uniform" (in [-scale, scale]) or
            "constant" (every value ``scale``; 0.0 gives zero rows).
        scale: the stddev, half-width or constant value.
        seed: changes every id's row; two tables with different seeds differ.

    Example:
        get_table("user", dim=16, initializer=InitialRows("uniform", scale=0.05, seed=7))
    """

    distribution: str = "normal"
    scale: float = 0.05
    seed: int = 0

    def __post_init__(self):
        if self.distribution not in DISTRIBUTIONS:
            raise ConfigError(
                f"InitialRows distribution {self.distribution!r} is not one of {', '.join(DISTRIBUTIONS)}"
            )
        if not math.isfinite(self.scale) or (self.distribution != "constant" and self.scale < 0):
            raise ConfigError(f"InitialRows scale {self.scale!r} must be a finite number >= 0")

    def rows(self, ids: tf.Tensor, dim: int, dtype: tf.DType) -> tf.Tensor:
        """The initial rows of ``ids``.

        Args:
            ids: A 1-D tensor of ids.
            dim: The row length.
            dtype: The rows' float dtype.

        Returns:
            A ``[len(ids), dim]`` tensor of ``dtype``, the same for an id in every process.
        """
        return self.rows_of_hashes(keys.hash64(ids), dim, dtype)

    def rows_of_hashes(self, hashes: tf.Tensor, dim: int, dtype: tf.DType) -> tf.Tensor:
        """The initial rows of the ids whose ``keys.hash64`` are ``hashes``: the same as ``rows``."""
        if self.distribution == "constant":
            return tf.fill(tf.stack([tf.size(hashes), dim]), tf.constant(self.scale, dtype))
        first = _uniform01(hashes, dim, self.seed, salt=0)
        if self.distribution == "uniform":
            return tf.cast((2.0 * first - 1.0) * self.scale, dtype)
        second = _uniform01(hashes, dim, self.seed, salt=_SALT_SECOND_DRAW)
        normal = tf.sqrt(-2.0 * tf.math.log(first)) * tf.cos(2.0 * math.pi * second)
        return tf.cast(normal * self.scale, dtype)


def _uniform01(hashes: tf.Tensor, dim: int, seed: int, salt: int) -> tf.Tensor:
    """float64 values in (0, 1), shape [len(hashes), dim], from the id's hash, the column, the seed and a salt."""
    per_id = tf.bitwise.bitwise_xor(hashes, tf.constant((seed * 0x2545F4914F6CDD1D + salt) % 2**64, tf.uint64))
    columns = tf.range(1, dim + 1, dtype=tf.int64)
    column_offsets = tf.bitcast(columns, tf.uint64) * tf.constant(keys.GOLDEN, tf.uint64)
    bits = keys.mix64(per_id[:, None] + column_offsets[None, :])
    # The top 52 bits, shifted by half a step: never 0 (log(0)) and never 1.
    top = tf.cast(tf.bitwise.right_shift(bits, tf.constant(12, tf.uint64)), tf.float64)
    return (top + 0.5) / float(2**52)
