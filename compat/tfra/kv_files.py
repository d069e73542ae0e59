"""TFRA's key-value files: a table shard saved to, and loaded from, ``DIR/NAME-keys`` and ``DIR/NAME-values``.

The files are TFRA's own format, so that files written by TFRA's ``save_to_file_system`` load here and
the other way round: ``-keys`` holds the keys' raw little-endian bytes one after another, ``-values``
each key's ``dim`` values the same way, in the Variable's key and value dtypes. Loading inserts the rows
through the Variable, so each id lands on the shard the tables' hash gives it, whatever sharding wrote
the files.
"""

from __future__ import annotations

import os

import tensorflow as tf

from ps_toolkit.dynamic_embedding import table_ops
from ps_toolkit_compat.tfra import errors

DIRPATH_ENV = "TFRA_SAVED_KV"  # TFRA's default: a folder named there takes the place of ``dirpath``


def _raw_bytes(tensor: tf.Tensor) -> tf.Tensor:
    """The tensor's elements as raw bytes: the content a serialized TensorProto ends with."""
    serialized = tf.io.serialize_tensor(tensor)
    content = tf.size(tensor) * tensor.dtype.size
    return tf.strings.substr(serialized, tf.strings.length(serialized) - content, content)


def _file_prefix(dirpath, file_name: str, dirpath_env: str | None) -> str:
    folder = os.environ.get(dirpath_env) if dirpath_env else None
    return f"{(folder or dirpath).rstrip('/')}/{file_name}"


def _check_fixed_size_keys(variable) -> None:
    if variable.key_dtype == tf.string:
        raise errors.TfraValueError(
            f"dynamic_embedding.Variable {variable.name!r}: save_to_file_system / load_from_file_system take "
            "int32 or int64 keys (the files hold fixed-size keys)"
        )


def save_shard(shard_table, dirpath, file_name: str, dirpath_env: str | None, append_to_file: bool) -> tf.Operation:
    """The op writing ``shard_table``'s ids and rows to ``PREFIX-keys`` / ``PREFIX-values`` (or appending)."""
    _check_fixed_size_keys(shard_table.variable)
    prefix = _file_prefix(dirpath, file_name, dirpath_env)
    ids, rows = shard_table.export()
    writes = []
    for path, content in ((f"{prefix}-keys", _raw_bytes(ids)), (f"{prefix}-values", _raw_bytes(rows))):
        if append_to_file:
            exists = tf.greater(tf.size(tf.io.matching_files(path)), 0)
            content = tf.compat.v1.cond(exists, lambda p=path, c=content: tf.io.read_file(p) + c, lambda c=content: c)
        writes.append(tf.io.write_file(path, content))
    return tf.group(*writes)


def load_files(variable, prefixes: list[str]) -> tf.Operation:
    """The op inserting into ``variable`` the rows of each ``PREFIX-keys`` / ``PREFIX-values`` pair."""
    _check_fixed_size_keys(variable)
    loads = []
    for prefix in prefixes:
        keys_path, values_path = f"{prefix}-keys", f"{prefix}-values"
        ids = tf.io.decode_raw(tf.io.read_file(keys_path), variable.key_dtype)
        values = tf.reshape(tf.io.decode_raw(tf.io.read_file(values_path), variable.value_dtype), [-1, variable.dim])
        same = tf.debugging.assert_equal(
            tf.shape(ids)[0],
            tf.shape(values)[0],
            message=f"the keys number in file {keys_path} is not equal to the value vectors number in file "
            f"{values_path}.",
        )
        with tf.control_dependencies([same]):
            rows = tf.cast(values, variable.table_value_dtype)
            loads.append(table_ops.insert(variable.table, variable.table_ids(ids), rows))
    return tf.group(*loads)


def load_shard(shard_table, dirpath, file_name: str, dirpath_env: str | None, load_entire_dir: bool) -> tf.Operation:
    """The op loading ``PREFIX-keys`` / ``-values``, or with ``load_entire_dir`` every shard's files of the
    table in the folder (``NAME_mht_*``), as TFRA's load did."""
    prefix = _file_prefix(dirpath, file_name, dirpath_env)
    if not load_entire_dir:
        return load_files(shard_table.variable, [prefix])
    stem = prefix[: prefix.rfind("_mht_") + len("_mht_")]
    found = sorted({path[: path.rfind("-")] for path in tf.io.gfile.glob(stem + "*")})
    return load_files(shard_table.variable, found)
