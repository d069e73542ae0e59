"""How tables lie on the ps: tables that agree on key and value dtype, dim, devices, initial rows and admission
share one group, and each ps holds one set of hash tables per group, keyed by (table tag, id).

A model with a table per feature thus has a handful of hash tables per ps,
not a few per feature: a step reads and updates each of them once per ps
(``group_reads``, ``updates``), a checkpoint exports each once (``saving``),
whatever the number of tables. A group shard holds:

- ``rows``: the row of every admitted id; an absent id reads NaN (the
  lookups put its initial row in its place);
- ``meta``: int64 [times seen, global step last seen] of every id trained,
  admitted or still being counted towards admission;
- ``stats``: int64 counters keyed [table tag, which] (admissions, evictions);
- one table per optimizer slot, made when an optimizer first applies.
"""

from __future__ import annotations

import dataclasses
import hashlib
import weakref

import tensorflow as tf

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.dynamic_embedding.hash_tables import HashTable

NEVER_SEEN = (0, -1)  # the meta of an id the shard does not know: seen 0 times, last at step -1
STAT_ADMITTED, STAT_EVICTED = 0, 1
# graph -> {GroupKey: TableGroup}
_GROUPS_BY_GRAPH = weakref.WeakKeyDictionary()


@dataclasses.dataclass(frozen=True)
class GroupKey:
    """What tables must share to live in one hash table per ps (each keeps its initial rows' seed and scale)."""

    key_dtype: tf.DType
    value_dtype: tf.DType
    dim: int
    devices: tuple
    distribution: str  # the InitialRows' (each table keeps its own seed and scale)
    admit_after: int

    @property
    def name(self) -> str:
        """The group's name on the ps: the same for the same key in every process."""
        described = f"{self.key_dtype.name}/{self.value_dtype.name}/{self.dim}/{self.distribution}/{self.admit_after}"
        digest = hashlib.blake2b(described.encode(), digest_size=4).hexdigest()
        return f"dynamic_tables/{self.key_dtype.name}_{self.value_dtype.name}_dim{self.dim}_{digest}"


class GroupShard:
    """Shard ``index`` of a group: its hash tables on ``device``."""

    def __init__(self, group: TableGroup, index: int, device: str | None):
        self.group, self.index, self.device = group, index, device
        key = group.key
        self.prefix = f"{key.name}/shard_{index}_of_{len(key.devices)}"
        self.rows = HashTable(f"{self.prefix}/rows", key.key_dtype, key.value_dtype, key.dim, float("nan"), device)
        self.meta = HashTable(f"{self.prefix}/meta", key.key_dtype, tf.int64, 2, NEVER_SEEN, device)
        self.stats = HashTable(f"{self.prefix}/stats", tf.int64, tf.int64, 1, 0, device)
        self.slots: dict[str, HashTable] = {}
        self._slot_listeners = []

    def slot(self, name: str) -> HashTable:
        """The hash table of optimizer slot ``name`` (made on first use, beside the rows)."""
        if name not in self.slots:
            key = self.group.key
            self.slots[name] = HashTable(
                f"{self.prefix}/slot_{name}", key.key_dtype, key.value_dtype, key.dim, 0, self.device
            )
            for listener in self._slot_listeners:
                listener(name, self.slots[name])
        return self.slots[name]

    def components(self) -> list[tuple[str, HashTable]]:
        """(checkpoint component, hash table) of the rows, the meta and each slot made so far."""
        return [("rows", self.rows), ("meta", self.meta)] + [(f"slot_{n}", t) for n, t in self.slots.items()]

    def on_new_slot(self, listener) -> None:
        """``listener(name, hash_table)`` for each slot made from now on."""
        self._slot_listeners.append(listener)

    def add_to_stat(self, tags: tf.Tensor, which: int, amounts: tf.Tensor) -> tf.Operation:
        """Adds ``amounts[i]`` to counter ``which`` of the table tagged ``tags[i]`` (distinct tags), on the ps."""
        stat_keys = tf.stack([tf.cast(tags, tf.int64), tf.fill(tf.shape(tags), tf.constant(which, tf.int64))], 1)
        return self.stats.insert(stat_keys, self.stats.find(stat_keys) + tf.cast(amounts, tf.int64)[:, None])

    def read_stat(self, tag: int, which: int) -> tf.Tensor:
        """Counter ``which`` of the table tagged ``tag`` (int64 scalar)."""
        return self.stats.find(tf.constant([[tag, which]], tf.int64))[0, 0]


class TableGroup:
    """The tables of one ``GroupKey`` and the group's shards."""

    def __init__(self, key: GroupKey):
        self.key = key
        self.tables = []
        self.shards = [GroupShard(self, i, device) for i, device in enumerate(key.devices)]
        self._by_tag = {}

    @property
    def num_shards(self) -> int:
        """The number of ps shards."""
        return len(self.shards)

    def add(self, table) -> None:
        """Adds ``table``; a ConfigError if its tag is another table's (two names with one 62-bit fingerprint)."""
        other = self._by_tag.get(table.tag)
        if other is not None and other.name != table.name:
            raise ConfigError(f"dynamic tables {other.name!r} and {table.name!r} have the same tag; rename one")
        self._by_tag[table.tag] = table
        self.tables.append(table)

    def index_and_tags(self, tables: list, sizes: list, joined: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """(table index, tag) of each of ``joined``, the ids of ``tables`` joined in order (``sizes[i]`` of
        ``tables[i]``): its table's index in ``self.tables`` (int32) and its table's tag (int64; one scalar
        when all are one table's on one shard, which the stored keys broadcast)."""
        if len({table.name for table in tables}) == 1:
            index = tf.fill(tf.shape(joined), self.tables.index(tables[0]))
            tag = tf.constant(tables[0].tag, tf.int64)
            return index, tag if self.num_shards == 1 else tf.fill(tf.shape(joined), tag)
        indices = [self.tables.index(table) for table in tables]
        index = tf.repeat(tf.constant(indices, tf.int32), tf.stack(sizes))
        return index, tf.gather(tf.constant([table.tag for table in self.tables], tf.int64), index)

    def table_index(self, tags: tf.Tensor) -> tf.Tensor:
        """The index in ``self.tables`` (int32) of each tag's table; tags of tables not in this graph's group
        get an index past the end."""
        order = sorted(range(len(self.tables)), key=lambda i: self.tables[i].tag)
        sorted_tags = tf.constant([self.tables[i].tag for i in order], tf.int64)
        position = tf.searchsorted(sorted_tags, tags, out_type=tf.int32)
        clipped = tf.minimum(position, len(order) - 1)
        known = tf.equal(tf.gather(sorted_tags, clipped), tags)
        return tf.where(known, tf.gather(tf.constant(order, tf.int32), clipped), len(order))


def group_of(key: GroupKey, graph=None) -> TableGroup:
    """The graph's group of ``key``, made (with its hash tables) on first call."""
    groups = _GROUPS_BY_GRAPH.setdefault(graph or tf.compat.v1.get_default_graph(), {})
    if key not in groups:
        with tf.control_dependencies(None):
            groups[key] = TableGroup(key)
    return groups[key]


def groups_of_graph(graph=None) -> list[TableGroup]:
    """The table groups of ``graph`` (default: the default graph)."""
    return list(_GROUPS_BY_GRAPH.get(graph or tf.compat.v1.get_default_graph(), {}).values())


def forget_groups(graph) -> None:
    """Drops the graph's groups (before a meta graph export; see table.clear_graph_collections)."""
    _GROUPS_BY_GRAPH.pop(graph, None)
