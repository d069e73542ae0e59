"""Ids as the tables take them: the key dtypes, a 64-bit hash per id, its save bucket and its shard.

Every id is hashed once to 64 bits (int64 ids by a splitmix64 finaliser,
strings by FarmHash, ``tf.strings.to_hash_bucket_fast``, then the same
finaliser, so that all 64 bits vary: FarmHash modulo 2**63 - 1 alone never
sets the top bit, and would leave half the buckets without a string id;
``saving.py`` restores checkpoints written with that hash). The hash picks the id's save
bucket (``NUM_SAVE_BUCKETS`` of them, fixed for every job) and the bucket picks
the shard (``bucket % num_shards``), so a bucket always lives whole on one
shard whatever the number of ps: a checkpoint is written bucket by bucket and
a job with another number of ps reads back the buckets its shards own.
"""

from __future__ import annotations

import hashlib

import tensorflow as tf

from ps_toolkit.base.errors import ConfigError

KEY_DTYPES = (tf.int64, tf.string)
# 64 buckets: shards of 1 to 64 ps hold at most one bucket more than another (2 ps: 32 each; 3 ps: 22/21/21).
NUM_SAVE_BUCKETS = 64
GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
_MIX1_INVERSE = pow(_MIX1, -1, 2**64)
_MIX2_INVERSE = pow(_MIX2, -1, 2**64)


def check_key_dtype(key_dtype, table_name: str) -> tf.DType:
    """The key dtype as a tf.DType; a ConfigError naming it unless it is int64 or string."""
    try:
        dtype = tf.as_dtype(key_dtype)
    except TypeError:
        dtype = None
    if dtype not in KEY_DTYPES:
        raise ConfigError(f"dynamic table {table_name!r}: key dtype {key_dtype!r} is not taken; valid: int64, string")
    return dtype


def _u64(value: int) -> tf.Tensor:
    return tf.constant(value, tf.uint64)


def mix64(values: tf.Tensor) -> tf.Tensor:
    """splitmix64's finaliser on uint64 values (wrapping arithmetic): every input bit moves every output bit."""
    shift = tf.bitwise.right_shift
    values = tf.bitwise.bitwise_xor(values, shift(values, _u64(30))) * _u64(_MIX1)
    values = tf.bitwise.bitwise_xor(values, shift(values, _u64(27))) * _u64(_MIX2)
    return tf.bitwise.bitwise_xor(values, shift(values, _u64(31)))


def _unshift(values: tf.Tensor, shift: int) -> tf.Tensor:
    """The inverse of ``values ^ (values >> shift)``."""
    result, applied = values, shift
    while applied < 64:
        result = tf.bitwise.bitwise_xor(values, tf.bitwise.right_shift(result, _u64(shift)))
        applied += shift
    return result


def unmix64(values: tf.Tensor) -> tf.Tensor:
    """The inverse of ``mix64``: splitmix64's finaliser is a bijection of uint64."""
    values = _unshift(values, 31) * _u64(_MIX2_INVERSE)
    values = _unshift(values, 27) * _u64(_MIX1_INVERSE)
    return _unshift(values, 30)


def ids_of_hashes(hashes: tf.Tensor) -> tf.Tensor:
    """The int64 ids whose ``hash64`` are ``hashes`` (uint64)."""
    return tf.bitcast(unmix64(hashes) - _u64(GOLDEN), tf.int64)


def hash64(ids: tf.Tensor) -> tf.Tensor:
    """A uint64 hash of each id, the same in every process (int64: splitmix64; string: FarmHash, then splitmix64's
    finaliser, a bijection that moves FarmHash's 63 bits into all 64)."""
    if ids.dtype == tf.string:
        return mix64(tf.bitcast(tf.strings.to_hash_bucket_fast(ids, 2**63 - 1), tf.uint64))
    return mix64(tf.bitcast(tf.cast(ids, tf.int64), tf.uint64) + _u64(GOLDEN))


def save_bucket(hashes: tf.Tensor) -> tf.Tensor:
    """The save bucket (int32 in [0, NUM_SAVE_BUCKETS)) of each hash."""
    # The high bits: the low ones already chose nothing else, but the high ones are splitmix's best mixed.
    return tf.cast(tf.bitwise.right_shift(hashes, _u64(58)), tf.int32)


def shard_of_bucket(buckets: tf.Tensor, num_shards: int) -> tf.Tensor:
    """The shard (int32 in [0, num_shards)) holding each bucket."""
    return tf.math.floormod(buckets, num_shards)


def shard_of(ids: tf.Tensor, num_shards: int) -> tf.Tensor:
    """The shard of each id: its save bucket mod the number of shards."""
    return shard_of_bucket(save_bucket(hash64(ids)), num_shards)


def buckets_of_shard(shard: int, num_shards: int) -> list[int]:
    """The save buckets shard ``shard`` of ``num_shards`` holds."""
    return list(range(shard, NUM_SAVE_BUCKETS, num_shards))


# --- Stored keys: (table, id) as one key of a group's hash table --------------------------------------------------

TAG_DIGITS = 19  # a tag below 2**62 written in decimal: the fixed-length prefix of a stored string key


def table_tag(table_name: str) -> int:
    """The table's tag: a 62-bit fingerprint of its name, the same in every process (>= 0, below 2**62)."""
    digest = hashlib.blake2b(table_name.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 2


def stored_keys(key_dtype: tf.DType, tags: tf.Tensor, ids: tf.Tensor, hashes: tf.Tensor) -> tf.Tensor:
    """The keys (table, id) are stored under: int64 [n, 2] pairs [tag, hash64(id)], or tag-prefixed strings.

    Args:
        key_dtype: The tables' key dtype.
        tags: The table tag of each id (int64, [n] or a scalar).
        ids: The ids.
        hashes: ``hash64(ids)``.

    Returns:
        One stored key per id, distinct for distinct (table, id): the int64 hash is a bijection of the id.
    """
    if key_dtype == tf.string:
        prefixes = tf.strings.as_string(tags, width=TAG_DIGITS, fill="0")
        return tf.strings.join([prefixes, ids])
    tags = tf.broadcast_to(tf.cast(tags, tf.int64), tf.shape(hashes))
    return tf.stack([tags, tf.bitcast(hashes, tf.int64)], 1)


def tags_of(key_dtype: tf.DType, stored: tf.Tensor) -> tf.Tensor:
    """The table tag (int64) of each stored key."""
    if key_dtype == tf.string:
        return tf.strings.to_number(tf.strings.substr(stored, 0, TAG_DIGITS), tf.int64)
    return stored[:, 0]


def ids_of(key_dtype: tf.DType, stored: tf.Tensor) -> tf.Tensor:
    """The id of each stored key."""
    if key_dtype == tf.string:
        return tf.strings.substr(stored, TAG_DIGITS, tf.int32.max)
    return ids_of_hashes(tf.bitcast(stored[:, 1], tf.uint64))


def hashes_of(key_dtype: tf.DType, stored: tf.Tensor) -> tf.Tensor:
    """``hash64`` of each stored key's id, without computing it again for int64 ids."""
    if key_dtype == tf.string:
        return hash64(ids_of(key_dtype, stored))
    return tf.bitcast(stored[:, 1], tf.uint64)
