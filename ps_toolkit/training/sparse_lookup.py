"""Embedding lookups that move each row once: unique ids, one pull and one push per ps for all the tables.

Design: docs/design.md, "One replica's step".
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
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
    ids = [tf.convert_to_tensor(i) for i in ids]
    results: list = [None] * len(tables)
    # Tables whose rows have one shape and dtype are looked up together, as one key space.
    families: dict[tuple, list[int]] = {}
    for n, table in enumerate(tables):
        parts = table_parts(table)
        if parts is None or not options.group_by_ps:
            lookup = TableLookup(table, ids[n], options.unique_ids)
            lookup.fetch_alone(options.wire_dtype)
            results[n] = lookup.result()
            continue
        first = parts[0][0]
        families.setdefault((tuple(first.shape[1:].as_list()), first.dtype.base_dtype), []).append(n)
    for members in families.values():
        fused = FusedLookup([tables[n] for n in members], [ids[n] for n in members], options)
        for n, rows in zip(members, fused.results(), strict=True):
            results[n] = rows
    return results


class FusedLookup:
    """Tables looked up as one: one key space, one unique, one pull and one push per ps for all of them.

    Table ``t``'s row ``i`` is key ``first_key[t] + i`` (the rows of the tables
    before it, then ``i``), so every table part holds one range of keys. The
    distinct keys are sorted by the part that holds them, the parts of one ps
    side by side; each ps receives its keys' row numbers in one tensor and
    sends their rows back in one. The worker's ops per step do not grow with
    the number of tables: 26 fields take one unique and one split by ps, not 26.
    """

    def __init__(self, tables: Sequence, ids: Sequence[tf.Tensor], options: LookupOptions):
        self.ids = list(ids)
        self.parts = []  # (part variable, its first key), in key order
        first_keys, table_rows = [], []  # of each lookup's table
        first_key_of_table: dict[tuple, int] = {}  # a table looked up twice keeps one key range
        for table in tables:
            parts = table_parts(table)
            identity = tuple(variable.ref() for variable, _ in parts)  # names can repeat in eager code
            if identity not in first_key_of_table:
                first_key_of_table[identity] = self.parts[-1][1] + self.parts[-1][0].shape[0] if self.parts else 0
                self.parts += [(variable, first_key_of_table[identity] + start) for variable, start in parts]
            first_keys.append(first_key_of_table[identity])
            table_rows.append(sum(variable.shape[0] for variable, _ in parts))
        flat = [tf.reshape(tf.cast(i, tf.int64), [-1]) for i in self.ids]
        self.sizes = [tf.size(f, out_type=tf.int32) for f in flat]
        # In one key space an id past its table's rows would read the next table's: refused, as a gather would.
        inside = [tf.reduce_all(tf.logical_and(f >= 0, f < rows)) for f, rows in zip(flat, table_rows, strict=True)]
        check = tf.debugging.Assert(
            inside[0] if len(inside) == 1 else tf.reduce_all(tf.stack(inside)), [_outside_message(tables, table_rows)]
        )
        with tf.control_dependencies([check]):  # an op made here, the identity too, waits for the check
            keyed = [f + first if first else tf.identity(f) for f, first in zip(flat, first_keys, strict=True)]
        all_keys = keyed[0] if len(keyed) == 1 else tf.concat(keyed, 0)
        if options.unique_ids:
            self.keys, self.positions = tf.unique(all_keys, out_idx=tf.int32)
        else:
            self.keys, self.positions = all_keys, None
        self.rows_by_part = self._fetch(options.wire_dtype)

    def _fetch(self, wire_dtype: str) -> tf.Tensor:
        """The keys' rows, sorted by the part that holds them (``self.order`` says which key each is)."""
        devices = list(dict.fromkeys(part.device for part, _ in self.parts))
        # A part's slot: its place when the parts are ordered by ps, then by key.
        by_slot = sorted(range(len(self.parts)), key=lambda j: devices.index(self.parts[j][0].device))
        slot_of_part = [by_slot.index(j) for j in range(len(self.parts))]
        count = len(self.parts)
        starts = tf.constant([first for _, first in self.parts], tf.int64)
        owner = tf.searchsorted(starts[1:], self.keys, side="right", out_type=tf.int32)
        slot = tf.gather(tf.constant(slot_of_part, tf.int32), owner)
        # The keys' indices grouped by slot (in the keys' order within a slot): the order the rows come back in.
        self.order = tf.concat(tf.dynamic_partition(tf.range(tf.size(self.keys, out_type=tf.int32)), slot, count), 0)
        # Row numbers within a part: int32 on the wire when every part's rows fit (half the bytes of int64).
        wire = tf.int32 if all(part.shape[0] < 2**31 for part, _ in self.parts) else tf.int64
        local = tf.cast(tf.gather(self.keys - tf.gather(starts, owner), self.order), wire)
        keys_per_slot = tf.math.bincount(slot, minlength=count, maxlength=count, dtype=wire)
        held = [[j for j in by_slot if self.parts[j][0].device == device] for device in devices]
        first_slot = [0, *itertools.accumulate(len(parts) for parts in held)]
        keys_per_ps = [keys_per_slot[first_slot[d] : first_slot[d + 1]] for d in range(len(devices))]
        local_per_ps = tf.split(local, tf.stack([tf.reduce_sum(k) for k in keys_per_ps]), num=len(devices))
        rows = []
        for parts, sizes, keys in zip(held, keys_per_ps, local_per_ps, strict=True):
            # The sizes travel at the head of the row numbers: one tensor to the ps.
            message = tf.concat([sizes, keys], axis=0)
            with tf.compat.v1.device(self.parts[parts[0]][0].device):
                sizes_there = tf.cast(message[: len(parts)], tf.int32)
                keys_there = tf.split(message[len(parts) :], sizes_there, num=len(parts))
                pulled = [tf.gather(self.parts[j][0], k) for j, k in zip(parts, keys_there, strict=True)]
                pulled = pulled[0] if len(pulled) == 1 else tf.concat(pulled, 0)
                if wire_dtype == "bfloat16":
                    pulled = tf.cast(pulled, tf.bfloat16)
            rows.append(_to_worker(pulled))
        rows = rows[0] if len(rows) == 1 else tf.concat(rows, 0)
        # Reshape's gradient is a dense tensor: the lookups' IndexedSlices gradient is summed here, on
        # the worker, into one row per key, before it is split by ps and sent.
        return tf.reshape(rows, tf.concat([[-1], tf.shape(rows)[1:]], 0))

    def results(self) -> list[tf.Tensor]:
        """Each table's rows in its ids' order and shape: ``ids.shape + row shape``."""
        where = tf.math.invert_permutation(self.order)  # key k's row is rows_by_part[where[k]]
        at = where if self.positions is None else tf.gather(where, self.positions)
        rows = tf.gather(self.rows_by_part, at)
        pieces = [rows] if len(self.ids) == 1 else tf.split(rows, tf.stack(self.sizes), num=len(self.ids))
        row_shape = tf.shape(rows)[1:]
        return [tf.reshape(p, tf.concat([tf.shape(i), row_shape], 0)) for p, i in zip(pieces, self.ids, strict=True)]


def _outside_message(tables: Sequence, table_rows: list) -> str:
    described = ", ".join(f"{_table_name(t)} ({rows} rows)" for t, rows in zip(tables, table_rows, strict=True))
    return f"embedding_lookups: an id outside the rows [0, rows) of its table; the tables: {described}"


def _table_name(table) -> str:
    name = getattr(table, "name", None) or table_parts(table)[0][0].name
    return name.split(":")[0]


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
