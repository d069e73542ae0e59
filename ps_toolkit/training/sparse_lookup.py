"""Embedding lookups that move each row once: unique ids, one pull and one push per ps for all the tables.

Design: docs/design.md, "One replica's step".
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence

import tensorflow as tf

WIRE_DTYPES = ("float32", "bfloat16")


@dataclasses.dataclass(frozen=True)
class LookupOptions:
    """How ``embedding_lookups`` moves rows (docs/design.md, "Embedding lookups that move each row once").

    Attributes:
        unique_ids: Look each table up at its distinct ids only, and push each row's gradient once.
        group_by_ps: One pull and one push per ps for all the table parts it holds.
        wire_dtype: ``"float32"``, or ``"bfloat16"`` for the rows and gradients on the network.
    """

    unique_ids: bool = True
    group_by_ps: bool = True
    wire_dtype: str = "float32"

    def __post_init__(self):
        if self.wire_dtype not in WIRE_DTYPES:
            raise ValueError(f"unknown wire dtype {self.wire_dtype!r}; valid: {', '.join(WIRE_DTYPES)}")


_IN_EFFECT: list[LookupOptions] = [LookupOptions()]


@contextlib.contextmanager
def options_in_effect(options: LookupOptions):
    """Makes ``options`` the defaults of ``embedding_lookups`` called inside.

    Args:
        options: The defaults to use inside the ``with`` block.

    Yields:
        ``options``.
    """
    _IN_EFFECT.append(options)
    try:
        yield options
    finally:
        _IN_EFFECT.pop()


def current_options() -> LookupOptions:
    """The options ``embedding_lookups`` uses when given none: the innermost ``options_in_effect``."""
    return _IN_EFFECT[-1]


def embedding_lookups(tables: Sequence, ids: Sequence[tf.Tensor], options: LookupOptions | None = None) -> list:
    """For each (table, ids) pair, the table's rows at ``ids``.

    Args:
        tables: The tables: variables, partitioned variables, or tensors (a small table pulled whole).
        ids: One integer ids tensor per table, of any shape.
        options: How rows move; by default ``current_options()``.

    Returns:
        One tensor per table, of shape ``ids.shape + [dim]``.

    Raises:
        ValueError: ``tables`` and ``ids`` differ in length.
    """
    if len(tables) != len(ids):
        raise ValueError(f"embedding_lookups needs one ids tensor per table; got {len(tables)} tables, {len(ids)} ids")
    options = options or current_options()
    lookups = [
        TableLookup(table, tf.convert_to_tensor(i), options.unique_ids) for table, i in zip(tables, ids, strict=True)
    ]
    if options.group_by_ps:
        _fetch_grouped(lookups, options.wire_dtype)
    else:
        for lookup in lookups:
            lookup.fetch_alone(options.wire_dtype)
    return [lookup.result() for lookup in lookups]


class TableLookup:
    """One table's lookup: its distinct ids, split by table part, and the rows fetched for them."""

    def __init__(self, table, ids: tf.Tensor, unique: bool):
        self.table, self.ids = table, ids
        flat = tf.reshape(ids, [-1])
        if unique:
            self.keys, self.positions = tf.unique(flat, out_idx=tf.int32)
        else:
            self.keys, self.positions = flat, None
        self.parts = table_parts(table)
        self.rows = None  # [len(keys), dim] once fetched
        self.pieces: list[tuple] = []  # (part variable, local ids, where its rows go among the keys)
        if self.parts is not None:
            self._split_by_part()

    def _split_by_part(self) -> None:
        starts = [start for _, start in self.parts]
        if len(self.parts) == 1:
            self.pieces = [(self.parts[0][0], self.keys, None)]
            return
        owner = tf.searchsorted(tf.constant(starts[1:], self.keys.dtype), self.keys, side="right", out_type=tf.int32)
        local = self.keys - tf.gather(tf.constant(starts, self.keys.dtype), owner)
        count = len(self.parts)
        local_ids = tf.dynamic_partition(local, owner, count)
        where = tf.dynamic_partition(tf.range(tf.size(self.keys, out_type=tf.int32)), owner, count)
        self.pieces = [(part, ids, at) for (part, _), ids, at in zip(self.parts, local_ids, where, strict=True)]

    def fetch_alone(self, wire_dtype: str) -> None:
        """Fetches this table's rows with a pull of its own per table part (not grouped by ps)."""
        if self.parts is None:
            self.rows = tf.gather(self.table, self.keys)
            return
        self.place([_to_worker(_gather_on_ps(part, ids, wire_dtype)) for part, ids, _ in self.pieces])

    def place(self, rows_per_piece: list) -> None:
        """Puts each piece's rows back in the order of the keys."""
        if len(rows_per_piece) == 1:
            self.rows = rows_per_piece[0]
            return
        self.rows = tf.dynamic_stitch([at for _, _, at in self.pieces], rows_per_piece)

    def result(self) -> tf.Tensor:
        """The rows in the ids' order and shape: ``ids.shape + [dim]``."""
        rows = self.rows if self.positions is None else tf.gather(self.rows, self.positions)
        return tf.reshape(rows, tf.concat([tf.shape(self.ids), tf.shape(rows)[-1:]], 0))


def table_parts(table) -> list[tuple] | None:
    """(variable, first row) of each part of a table on the ps; None for a tensor (looked up where it is)."""
    if isinstance(table, tf.Tensor):
        return None
    variables = list(table) if not isinstance(table, tf.Variable) else [table]
    parts, start = [], 0
    for variable in variables:
        parts.append((variable, start))
        start += variable.shape[0]
    return parts


def _gather_on_ps(part, local_ids, wire_dtype: str):
    with tf.compat.v1.device(part.device):
        rows = tf.gather(part, local_ids)
        return tf.cast(rows, tf.bfloat16) if wire_dtype == "bfloat16" else rows


def _to_worker(rows):
    return tf.cast(rows, tf.float32) if rows.dtype != tf.float32 else rows


def _fetch_grouped(lookups: list[TableLookup], wire_dtype: str) -> None:
    """All the pieces held by one ps: their ids in one tensor there, their rows in one tensor back."""
    by_device: dict[str, list] = {}
    for n, lookup in enumerate(lookups):
        if lookup.parts is None:
            lookup.fetch_alone(wire_dtype)
            continue
        for k, (part, ids, _) in enumerate(lookup.pieces):
            by_device.setdefault(part.device, []).append((n, k, part, ids))
    fetched: dict[tuple, tf.Tensor] = {}
    for device, pieces in by_device.items():
        # Row numbers within a part: int32 on the wire when every part's rows fit (half the bytes of int64).
        wire = tf.int32 if all(part.shape[0] < 2**31 for _, _, part, _ in pieces) else tf.int64
        ids = [tf.cast(piece_ids, wire) for _, _, _, piece_ids in pieces]
        sizes = tf.stack([tf.size(i, out_type=wire) for i in ids])
        # The sizes travel at the head of the ids: one tensor to the ps.
        message = tf.concat([sizes, *ids], axis=0)
        with tf.compat.v1.device(device):
            sizes_there = tf.cast(message[: len(pieces)], tf.int32)
            ids_there = tf.split(message[len(pieces) :], sizes_there, num=len(pieces))
            rows = tf.concat([tf.gather(part, i) for (_, _, part, _), i in zip(pieces, ids_there, strict=True)], 0)
            if wire_dtype == "bfloat16":
                rows = tf.cast(rows, tf.bfloat16)
        rows = _to_worker(rows)
        for (n, k, _, _), piece_rows in zip(
            pieces, tf.split(rows, tf.cast(sizes, tf.int32), num=len(pieces)), strict=True
        ):
            fetched[(n, k)] = piece_rows
    for n, lookup in enumerate(lookups):
        if lookup.parts is not None:
            lookup.place([fetched[(n, k)] for k in range(len(lookup.pieces))])
