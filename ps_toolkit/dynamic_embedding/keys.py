"""Ids as the tables take them: the key dtypes, a 64-bit hash per id, its save bucket and its shard.

Every id is hashed once to 64 bits (int64 ids by a splitmix64 finaliser,
strings by ``tf.strings.to_hash_bucket_fast``). The hash picks the id's save
bucket (``NUM_SAVE_BUCKETS`` of them, fixed for every job) and the bucket picks
the shard (``bucket % num_shards``), so a bucket always lives whole on one
shard whatever the number of ps: a checkpoint is written bucket by bucket and
a job with another number of ps reads back the buckets its shards own.
"""

from __future__ import annotations

import tensorflow as tf

from ps_toolkit.base.errors import ConfigError

KEY_DTYPES = (tf.int64, tf.string)
# 64 buckets: shards of 1 to 64 ps hold at most one bucket more than another (2 ps: 32 each; 3 ps: 22/21/21).
NUM_SAVE_BUCKETS = 64
GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB


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


def hash64(ids: tf.Tensor) -> tf.Tensor:
    """A uint64 hash of each id, the same in every process (int64: splitmix64; string: FarmHash)."""
    if ids.dtype == tf.string:
        return tf.bitcast(tf.strings.to_hash_bucket_fast(ids, 2**63 - 1), tf.uint64)
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
