"""Restoring a string-keyed group: each restored bucket's ids sent to the shard that owns them under today's hash.

A checkpoint names a string id's rows after its save bucket, and the bucket
comes from the id's hash. Checkpoints written before the string hash used all
64 bits (ps_toolkit 619fc51 and earlier) hold each id in the bucket of the old
hash, so the bucket a shard reads back can hold ids that another shard owns
now. The restore therefore reads each bucket once, on the shard that owns the
bucket, finds each id's owner from today's hash and sends it there: every id
lands on its shard whatever hash wrote the checkpoint, no format marker is
needed, and the checkpoint is read once in all (with today's hash every id
stays where it was read).

The Saver calls each shard's ``restore`` in turn; the saveables of one
component of one group wait in ``_PENDING`` until the last one arrives, which
builds every shard's replace. All shards of a group must therefore be in the
same Saver, as the default Saver and the toolkit's own hold them.
"""

from __future__ import annotations

import weakref

import tensorflow as tf

from ps_toolkit.dynamic_embedding import keys
from ps_toolkit.dynamic_embedding.hash_tables import on_device

# graph -> {(the Saver's filename tensor, group, component): {shard index: the shard's restored entries}}
_PENDING = weakref.WeakKeyDictionary()


def _saver_of(restored: tf.Tensor) -> str:
    """A name for the Saver build ``restored`` comes from: its restore op's filename input (one per Saver)."""
    op = getattr(restored, "op", None)
    return op.inputs[0].name if op is not None and op.inputs else ""


def routed_restore(saveable, restored: tf.Tensor, ids, values, tags, check) -> tf.Operation:
    """Restores ``saveable``'s shard once every shard of its group's component has been restored by this Saver.

    Args:
        saveable: The shard's GroupShardSaveable.
        restored: One of the tensors the Saver restored for it (names the Saver).
        ids, values, tags: The entries read from the shard's buckets, on its ps.
        check: The op checking their row width.

    Returns:
        A no-op until the group's last shard arrives; then the op replacing every shard's content.
    """
    shard, group = saveable.shard, saveable.shard.group
    pending = _PENDING.setdefault(tf.compat.v1.get_default_graph(), {})
    key = (_saver_of(restored), id(group), saveable.component)
    arrived = pending.setdefault(key, {})
    arrived[shard.index] = (saveable, ids, values, tags, check)
    if len(arrived) < group.num_shards:
        return tf.no_op()
    del pending[key]
    return _replace_all(group, [arrived[index] for index in range(group.num_shards)])


def _replace_all(group, restored: list) -> tf.Operation:
    num_shards, key_dtype = group.num_shards, group.key.key_dtype
    sent = []  # per source shard: (ids, values, tags, hashes), each split by the shard that owns the id now
    for saveable, ids, values, tags, _ in restored:
        with on_device(saveable.device):
            hashes = keys.hash64(ids)
            owner = keys.shard_of_bucket(keys.save_bucket(hashes), num_shards)
            sent.append([tf.dynamic_partition(part, owner, num_shards) for part in (ids, values, tags, hashes)])
    checks = [check for *_, check in restored]
    done = []
    for target, (saveable, *_) in enumerate(restored):
        width = saveable.hash_table.width
        with on_device(saveable.device):
            ids, values, tags, hashes = (tf.concat([parts[k][target] for parts in sent], 0) for k in range(4))
            stored = keys.stored_keys(key_dtype, tags, ids, hashes)
            with tf.control_dependencies(checks):
                replaced = saveable.hash_table.replace(stored, tf.ensure_shape(values, [None, width]))
            with tf.control_dependencies([replaced]):
                done.append(saveable.filled.assign(True, read_value=False))
    return tf.group(done)
