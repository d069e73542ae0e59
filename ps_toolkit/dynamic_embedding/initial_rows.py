"""The row an id reads before it was ever trained: a pure function of (id, column, seed), so every replica agrees.

No random op and no per-id state: the id's 64-bit hash is mixed with the
index of a pair of columns and the seed (splitmix64), and each 64-bit word is
cut into two 32-bit uniforms: two columns of a uniform in [-scale, scale], or
(Box-Muller, both its cosine and its sine) two columns of a normal of stddev
``scale``. The same id gets the same row on every worker, on every ps, in
every restart and in the exported model. The draws are float32 and one mixing
serves two columns because a new id's row is computed on the ps in the step
that reads it: at a million ids per field most of a step's ids are new.
"""

from __future__ import annotations

import dataclasses
import math

import tensorflow as tf

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.dynamic_embedding import keys

DISTRIBUTIONS = ("normal", "uniform", "constant")
_SALT = 0x5851F42D4C957F2D


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

    @classmethod
    def rows_of_group(cls, initializers, table_index: tf.Tensor, hashes: tf.Tensor, dim: int, dtype: tf.DType):
        """``group_rows`` for initializers all of this class; None where they cannot be computed together.

        None for a subclass that does not say how, or for several distributions.
        """
        if cls is not InitialRows or len({i.distribution for i in initializers}) != 1:
            return None
        return group_rows(initializers, table_index, hashes, dim, dtype)

    def rows_of_hashes(self, hashes: tf.Tensor, dim: int, dtype: tf.DType) -> tf.Tensor:
        """The initial rows of the ids whose ``keys.hash64`` are ``hashes``: the same as ``rows``."""
        return group_rows([self], tf.zeros_like(hashes, tf.int32), hashes, dim, dtype)


def group_rows(initializers, table_index: tf.Tensor, hashes: tf.Tensor, dim: int, dtype: tf.DType) -> tf.Tensor:
    """The initial rows of ids of several tables at once, each by its own table's ``InitialRows``.

    Args:
        initializers: One ``InitialRows`` per table, all of one distribution (seeds and scales may differ).
        table_index: The index in ``initializers`` of each id's table (int32).
        hashes: ``keys.hash64`` of each id.
        dim: The row length.
        dtype: The rows' float dtype.

    Returns:
        ``[len(hashes), dim]``: for each id what its table's ``InitialRows.rows`` gives it.
    """
    (distribution,) = {initializer.distribution for initializer in initializers}
    scale = tf.gather(tf.constant([i.scale for i in initializers], tf.float32), table_index)[:, None]
    if distribution == "constant":
        return tf.cast(tf.broadcast_to(scale, tf.stack([tf.size(hashes), dim])), dtype)
    first, second = _uniform_pairs(hashes, (dim + 1) // 2, _salted([i.seed for i in initializers], table_index))
    if distribution == "uniform":
        draws = tf.concat([first, second], axis=1) * 2.0 - 1.0
    else:
        radius, angle = tf.sqrt(-2.0 * tf.math.log(first)), (2.0 * math.pi) * second
        draws = tf.concat([radius * tf.cos(angle), radius * tf.sin(angle)], axis=1)
    return tf.cast(draws[:, :dim] * scale, dtype)


def of_group(group, table_index: tf.Tensor, ids: tf.Tensor, hashes: tf.Tensor) -> tf.Tensor:
    """The initial rows of ids of a group's tables (``table_index`` into ``group.tables``).

    Computed together when every table uses ``InitialRows`` itself, else (an initializer of
    its own, such as the TFRA layer's) each table's by its own ``rows``.
    """
    key, tables = group.key, group.tables
    kind = type(tables[0].initializer)
    if issubclass(kind, InitialRows) and all(type(table.initializer) is kind for table in tables):
        initializers = [table.initializer for table in tables]
        rows = kind.rows_of_group(initializers, table_index, hashes, key.dim, key.value_dtype)
        if rows is not None:
            return rows
    positions = tf.dynamic_partition(tf.range(tf.size(table_index)), table_index, len(tables))
    parts = tf.dynamic_partition(ids, table_index, len(tables))
    rows = [table.initial_rows(part) for table, part in zip(tables, parts, strict=True)]
    return tf.reshape(tf.dynamic_stitch(positions, rows), tf.stack([tf.size(table_index), key.dim]))


def _salted(seeds, table_index: tf.Tensor) -> tf.Tensor:
    """Each id's seed word (uint64): its table's seed, multiplied out so near seeds differ in every bit."""
    words = [(seed * 0x2545F4914F6CDD1D + _SALT) % 2**64 for seed in seeds]
    return tf.gather(
        tf.bitcast(tf.constant([w - 2**64 if w >= 2**63 else w for w in words], tf.int64), tf.uint64), table_index
    )


def _uniform_pairs(hashes: tf.Tensor, pairs: int, seed_words: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Two float32 tensors [len(hashes), pairs] of values in (0, 1]: the high and the low 32 bits of one mixing.

    Each value is (k + 0.5) / 2**32 for a 32-bit k, so never 0 (Box-Muller's log(0)); float32 may round the
    largest up to 1.0, whose log is 0, a finite draw.
    """
    per_id = tf.bitwise.bitwise_xor(hashes, seed_words)
    columns = tf.range(1, pairs + 1, dtype=tf.int64)
    column_offsets = tf.bitcast(columns, tf.uint64) * tf.constant(keys.GOLDEN, tf.uint64)
    bits = keys.mix64(per_id[:, None] + column_offsets[None, :])
    high = tf.bitwise.right_shift(bits, tf.constant(32, tf.uint64))
    low = tf.bitwise.bitwise_and(bits, tf.constant(0xFFFFFFFF, tf.uint64))
    return tuple((tf.cast(half, tf.float32) + 0.5) * (1.0 / 2**32) for half in (high, low))
