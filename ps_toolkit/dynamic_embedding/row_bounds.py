"""Each table's bound on the rows of a shard: the user's ``max_rows_per_shard``, or a default from the ps's memory.

The rule (docs/dynamic_embedding.md, "Memory"): of a ps's memory
(``ps_memory``), ``MEMORY_SHARE`` is for its tables' rows. The tables with a
bound of their own take theirs first (bound x bytes a row); the rest is split
so that every table without one gets the same number of rows per shard:
``(share of memory - bounds given) / sum of their bytes a row``, at least
``MIN_DEFAULT_ROWS``. A row's bytes (``bytes_a_row``) count every hash table
an id fills on the shard (rows, meta, each optimizer slot) at their largest:
a dense table's bucket array doubles when 80% full, so it holds between 1.25
and 2.5 buckets an entry. ``max_rows_per_shard=0`` is no bound.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from ps_toolkit.dynamic_embedding import ps_memory
from ps_toolkit.dynamic_embedding.table import UNBOUNDED

# Of a ps's memory, what its tables' rows may take: a save or an eviction holds a copy of a
# component beside the tables for a while, and the ps's own runtime needs the rest.
MEMORY_SHARE = 0.4
MIN_DEFAULT_ROWS = 1000
WARN_SHARES = (0.8, 1.0)  # shares of a default bound a shard passes: one warning each per table, the highest
DENSE_KEY_BYTES = 16  # [table tag, mixed id]
DENSE_BUCKETS_AN_ENTRY = 2.5  # just after a doubling: 2^k buckets, 40% full
# A string table (std::unordered_map of tensors): the node, the key string, the value array's header.
STRING_ENTRY_BYTES = 112


@dataclasses.dataclass(frozen=True)
class Bound:
    """A table's bound on each of its shards: ``rows[i]`` (None: none, or not known yet) and where it comes from."""

    rows: tuple
    source: str  # "max_rows_per_shard", "default", "none"
    memory: tuple = ()  # the default's: each shard's ps memory (bytes; 0: not known yet)


def bytes_a_row(table) -> int:
    """The bytes one id of ``table`` takes on a shard at most: its row, its meta and its optimizer slots."""
    shard = table.shards[0]
    widths = [(table.dim, table.value_dtype.size), (2, tf.int64.size)]
    widths += [(table.dim, table.value_dtype.size) for _ in shard.slots]
    if table.key_dtype == tf.int64:
        return int(sum((DENSE_KEY_BYTES + width * size) * DENSE_BUCKETS_AN_ENTRY for width, size in widths))
    return sum(STRING_ENTRY_BYTES + width * size for width, size in widths)


def bounds(tables: list, memory: dict) -> dict:
    """Table name -> its ``Bound``, from each ps device's memory (``memory[device]``, bytes; 0: not known)."""
    per_device = {device: _default_rows(tables, device, memory.get(device, 0)) for device in memory}
    result = {}
    for table in tables:
        if table.max_rows_per_shard == UNBOUNDED:
            result[table.name] = Bound((None,) * table.num_shards, "none")
        elif table.max_rows_per_shard is not None:
            result[table.name] = Bound((table.max_rows_per_shard,) * table.num_shards, "max_rows_per_shard")
        else:
            rows = tuple(per_device.get(device) for device in table.devices)
            result[table.name] = Bound(rows, "default", tuple(memory.get(device, 0) for device in table.devices))
    return result


def _default_rows(tables: list, device, memory: int) -> int | None:
    """The default bound of the tables on ``device`` (None while its memory is not known)."""
    if memory <= 0:
        return None
    here = [table for table in tables if device in table.devices]
    given = sum(t.max_rows_per_shard * bytes_a_row(t) for t in here if t.max_rows_per_shard not in (None, UNBOUNDED))
    defaulted = sum(bytes_a_row(t) for t in here if t.max_rows_per_shard is None)
    if not defaulted:
        return None
    return max(MIN_DEFAULT_ROWS, int((memory * MEMORY_SHARE - given) // defaulted))


def statement(table, bound: Bound) -> str:
    """The start-up line of ``table``'s bound."""
    if bound.source == "none":
        return f"dynamic table {table.name!r}: no bound on its rows (max_rows_per_shard=0)"
    if bound.source == "max_rows_per_shard":
        return f"dynamic table {table.name!r}: at most {bound.rows[0]:,} rows per shard (max_rows_per_shard)"
    known = [rows for rows in bound.rows if rows is not None]
    if not known:
        return f"dynamic table {table.name!r}: no default bound yet (its ps have not said their memory)"
    low, high = min(known), max(known)
    figure = f"{low:,}" if low == high else f"{low:,} to {high:,}"
    memory = sorted({m // (1 << 20) for m in bound.memory if m > 0})
    memory_text = f"{memory[0]:,} MB" if len(memory) == 1 else f"{memory[0]:,} to {memory[-1]:,} MB"
    whose = "each ps's" if any(ps_memory.publishes(device) for device in table.devices) else "this process's"
    return (
        f"dynamic table {table.name!r}: at most {figure} rows per shard by default "
        f"({MEMORY_SHARE:.0%} of {whose} {memory_text} over its tables, {bytes_a_row(table):,} bytes a row); "
        "max_rows_per_shard sets another bound, 0 none"
    )


class Warnings:
    """One warning per table and share of ``WARN_SHARES`` of a default bound its fullest shard passes.

    A maintenance run that finds a shard past two shares at once says only the higher one.
    """

    def __init__(self):
        self._said = set()

    def lines(self, table, bound: Bound, rows_per_shard: list) -> list:
        """The warning (a list of at most one line) the shards' rows before the eviction call for, if not said."""
        if bound.source != "default":
            return []
        shares = [rows / limit if limit else 0.0 for rows, limit in zip(rows_per_shard, bound.rows, strict=True)]
        i = max(range(len(shares)), key=shares.__getitem__)
        passed = [share for share in WARN_SHARES if shares[i] >= share]
        if not passed or (table.name, passed[-1]) in self._said:
            return []
        self._said.update((table.name, share) for share in passed)  # a share passed with a higher one: not said
        if passed[-1] >= 1:
            what, then = "reached", "its least recently seen ids are evicted"
        else:
            what, then = f"passed {passed[-1]:.0%} of", "beyond it the least recently seen are evicted"
        where = table.devices[i] or "local"
        return [
            f"dynamic table {table.name!r}: shard {i} ({where}) holds {rows_per_shard[i]:,} rows and {what} "
            f"its default bound of {bound.rows[i]:,}; {then}; max_rows_per_shard sets another bound, 0 none"
        ]
