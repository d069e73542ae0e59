"""TFRA's table-level ``Variable`` methods (upsert, remove, clear, accum, lookup with exists, tables) on the tables.

Each is built from ``ps_toolkit.dynamic_embedding.table_ops`` on the
Variable's DynamicTable. ``Variable.tables`` gives one ``ShardTable`` per
shard: TFRA's per-shard hash table, here a handle a ``tf.compat.v1.train.Saver``
takes in its ``var_list`` (the shard's rows, ids' records and slots).
"""

from __future__ import annotations

import tensorflow as tf

from ps_toolkit import dynamic_embedding as tables
from ps_toolkit.dynamic_embedding import keys as table_keys
from ps_toolkit.dynamic_embedding import shard_records, table_ops
from ps_toolkit_compat import tf_internals
from ps_toolkit_compat.tfra import errors, kv_files


def checked_keys(variable, keys) -> tf.Tensor:
    """``keys`` as the table takes them; TFRA's table's ValueError for keys of another dtype."""
    keys = keys if isinstance(keys, tf.Tensor) else tf.convert_to_tensor(keys, dtype=variable.key_dtype)
    if keys.dtype != variable.key_dtype:
        raise errors.TfraValueError(  # TFRA's table converted keys to its dtype: a ValueError
            f"Signature mismatch. Keys must be dtype {variable.key_dtype!r}, got {keys.dtype!r}."
        )
    return variable.table_ids(keys)


def _values(variable, values, keys: tf.Tensor) -> tf.Tensor:
    """``values`` (``keys.shape + [dim]``) as [n, dim] rows; TFRA's errors for another dtype or shape."""
    values = values if isinstance(values, tf.Tensor) else tf.convert_to_tensor(values, dtype=variable.value_dtype)
    if values.dtype != variable.value_dtype:
        raise errors.TfraValueError(
            f"Signature mismatch. Values must be dtype {variable.value_dtype!r}, got {values.dtype!r}."
        )
    expected = keys.shape.concatenate([variable.dim])
    if not values.shape.is_compatible_with(expected):
        raise errors.TfraValueError(f"Expected shape {expected} for values, got {values.shape}")
    return tf.cast(tf.reshape(values, [-1, variable.dim]), variable.table_value_dtype)


def upsert(variable, keys, values, name=None) -> tf.Operation:
    """Writes ``values`` as the rows of ``keys`` (any shape; values ``keys.shape + [dim]``)."""
    with tf.name_scope(name or "upsert"):
        keys = checked_keys(variable, keys)
        rows = _values(variable, values, keys)
        return table_ops.insert(variable.table, tf.reshape(keys, [-1]), rows)


def remove(variable, keys, name=None) -> tf.Operation:
    with tf.name_scope(name or "remove"):
        return table_ops.remove(variable.table, tf.reshape(checked_keys(variable, keys), [-1]))


def clear(variable, name=None) -> tf.Operation:
    with tf.name_scope(name or "clear"):
        return table_ops.clear(variable.table)


def lookup_with_exists(variable, keys, name=None) -> tuple[tf.Tensor, tf.Tensor]:
    """(rows, exists): the rows of ``keys`` (initial rows where absent) and whether each key has a row."""
    with tf.name_scope(name or "lookup"):
        keys = checked_keys(variable, keys)
        rows = variable.read_values(tables.lookup(variable.table, keys))
        return rows, table_ops.contains(variable.table, keys)


def accum(variable, keys, old_values, new_values, exists, name=None) -> tf.Operation:
    """TFRA's accum: a key that existed (``exists``) and still does gets ``new - old`` added to its row; one that
    did not and still does not gets ``new_values``; the others (changed meanwhile by another process) stay."""
    with tf.name_scope(name or "accum"):
        keys = tf.reshape(checked_keys(variable, keys), [-1])
        old_rows = _values(variable, old_values, keys)
        new_rows = _values(variable, new_values, keys)
        existed = tf.reshape(tf.convert_to_tensor(exists, tf.bool), [-1])
        current = tables.lookup(variable.table, keys)
        present = table_ops.contains(variable.table, keys)
        written = tf.equal(existed, present)
        rows = tf.where(existed[:, None], current + (new_rows - old_rows), new_rows)
        return table_ops.insert(variable.table, tf.boolean_mask(keys, written), tf.boolean_mask(rows, written))


def component_saveables(shard) -> list:
    """The saveables in the graph's SAVEABLE_OBJECTS of a shard's hash tables: rows, id records and every slot."""
    return _saveables_of([shard.rows, shard.meta, *shard.slots.values()])


def _saveables_of(hash_tables) -> list:
    handles = {id(hash_table.handle) for hash_table in hash_tables}
    saveables = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.SAVEABLE_OBJECTS)
    return [saveable for saveable in saveables if id(getattr(saveable, "op", None)) in handles]


class ShardTable(tf_internals.trackable_base()):
    """TFRA's per-shard hash table (``Variable.tables[i]``): its size, export and its checkpoint entries."""

    def __init__(self, variable, index: int, slot: str | None = None):
        self._variable, self._index, self._slot = variable, index, slot
        self._shard = variable.table.shards[index]
        # TFRA's table names: NAME_mht_IofN, a slot's NAME_SLOT_mht_IofN, a "/" in NAME written "_".
        prefix = variable.name if slot is None else f"{variable.name}_{slot}"
        self.name = f"{prefix.replace('/', '_')}_mht_{index + 1}of{variable.shard_num}"

    @property
    def resource_handle(self) -> tf.Tensor:
        return self._shard.rows.handle

    def size(self, name=None) -> tf.Tensor:
        with tf.name_scope(name or "size"):
            return shard_records.row_count(self._variable.table, self._shard)

    def export(self, name=None) -> tuple[tf.Tensor, tf.Tensor]:
        with tf.name_scope(name or "export"):
            table = self._variable.table
            found = shard_records.entries(self._shard, self._shard.rows)
            stored, rows = shard_records.of_table(found, self._shard.group.tables.index(table))
            ids = table_keys.ids_of(table.key_dtype, stored)
            ids = tf.cast(ids, tf.int32) if self._variable.key_dtype == tf.int32 else ids
            return ids, self._variable.read_values(rows)

    @property
    def variable(self):
        return self._variable

    def save_to_file_system(
        self,
        dirpath,
        file_name=None,
        dirpath_env=kv_files.DIRPATH_ENV,
        append_to_file=False,
        buffer_size=None,
        name=None,
    ) -> tf.Operation:
        """TFRA's: the op writing this shard's ids and rows to ``DIR/FILE-keys`` and ``DIR/FILE-values``."""
        del buffer_size  # TFRA's I/O buffer
        with tf.name_scope(name or f"{self.name}_save_table"):
            return kv_files.save_shard(self, dirpath, file_name or self.name, dirpath_env, append_to_file)

    def load_from_file_system(
        self,
        dirpath,
        file_name=None,
        dirpath_env=kv_files.DIRPATH_ENV,
        load_entire_dir=False,
        buffer_size=None,
        name=None,
    ) -> tf.Operation:
        """TFRA's: the op inserting the rows of ``DIR/FILE-keys`` / ``-values`` (written here or by TFRA)."""
        del buffer_size
        with tf.name_scope(name or f"{self.name}_load_table"):
            return kv_files.load_shard(self, dirpath, file_name or self.name, dirpath_env, load_entire_dir)

    def _gather_saveables_for_checkpoint(self):
        """A Saver's entries for this table: the shard's rows and id records; a slot's table: that slot (as in
        TFRA, a Saver given a Variable's tables saves no optimizer slot unless given the slots' tables too)."""
        shard = self._shard
        hash_tables = [shard.rows, shard.meta] if self._slot is None else [shard.slot(self._slot)]
        return {saveable.name: saveable for saveable in _saveables_of(hash_tables)}


def variable_saveables(variable) -> dict:
    """{name: saveable} of every shard of ``variable``: what a Saver's ``var_list`` entry of it saves."""
    return {saveable.name: saveable for shard in variable.table.shards for saveable in component_saveables(shard)}
