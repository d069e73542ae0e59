"""String ids over all 64 save buckets, and string-keyed checkpoints of the older hash restoring onto 1, 2 or 3 ps.

The older hash (FarmHash modulo 2**63 - 1, ps_toolkit 619fc51 and earlier) never set the top bit, so string
ids fell in buckets 0 to 31 only. tests/fixtures/table_checkpoint/string_hash_v1 is a checkpoint that code
wrote (its make_string_checkpoint.py): each id there sits in its old bucket, which today's hash maps to
another bucket, and often another shard.
"""

import os

import numpy as np
import pytest
import tensorflow as tf

from ps_toolkit import dynamic_embedding as de
from ps_toolkit.dynamic_embedding import keys, shard_records

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "table_checkpoint", "string_hash_v1")
STRING_IDS = np.array([f"user:{i}".encode() for i in range(297)] + [b"", b"\x00", b"x" * 4096], dtype=object)
INT_IDS = np.array([1, 2, 3, 400, 5000, -7, 2**62], np.int64)


def test_string_ids_fall_in_all_64_buckets_and_on_each_of_64_shards():
    ids = tf.constant([f"id-{i}".encode() for i in range(5000)])
    buckets = np.bincount(keys.save_bucket(keys.hash64(ids)).numpy(), minlength=keys.NUM_SAVE_BUCKETS)
    assert len(buckets) == keys.NUM_SAVE_BUCKETS and buckets.min() > 0, buckets
    # About 5000 / 64 = 78 per bucket: the top bit is as often set as not.
    assert buckets.min() > 40 and buckets.max() < 125, buckets
    for num_shards in (33, 48, 64):
        shards = np.bincount(keys.shard_of(ids, num_shards).numpy(), minlength=num_shards)
        assert shards.min() > 0, (num_shards, shards)


def _model(num_shards: int):
    devices = ["/cpu:0"] * num_shards
    step = tf.compat.v1.train.get_or_create_global_step()
    words = de.get_table("words", 4, key_dtype=tf.string, admit_after=2, devices=devices)
    numbers = de.get_table("numbers", 4, devices=devices)
    string_ids, int_ids = tf.constant(STRING_IDS), tf.constant(INT_IDS)
    loss = tf.reduce_sum(de.lookup(words, string_ids) ** 2) + tf.reduce_sum(de.lookup(numbers, int_ids) ** 2)
    train = de.TableOptimizer(tf.compat.v1.train.AdagradOptimizer(0.1)).minimize(loss, global_step=step)
    return words, numbers, train, (de.lookup(words, string_ids), de.lookup(numbers, int_ids))


def _shard_ids(table) -> list:
    """Per shard, an op reading the ids of ``table`` it holds."""
    index = table.group.tables.index(table)
    return [
        keys.ids_of(tf.string, shard_records.of_table(shard_records.entries(shard, shard.rows), index)[0])
        for shard in table.shards
    ]


def _check_restored(session, words, numbers, reads, expected, accumulators):
    """Every row and accumulator back, each string id on the one shard today's hash names."""
    rows_words, rows_numbers = session.run(reads)
    np.testing.assert_allclose(rows_words, expected["words"], rtol=1e-6)
    np.testing.assert_allclose(rows_numbers, expected["numbers"], rtol=1e-6)
    assert session.run((words.size(), numbers.size())) == (len(STRING_IDS), len(INT_IDS))
    ids, values = session.run(accumulators)
    by_id = dict(zip(ids.tolist(), values, strict=True))
    assert set(by_id) == set(STRING_IDS.tolist())
    np.testing.assert_allclose(np.stack([by_id[i] for i in STRING_IDS.tolist()]), expected["accumulators"])
    owners = session.run(keys.shard_of(tf.constant(STRING_IDS), words.num_shards)).tolist()
    held = session.run(_shard_ids(words))
    for shard, shard_ids in enumerate(held):
        owned = [i for i, owner in zip(STRING_IDS.tolist(), owners, strict=True) if owner == shard]
        assert sorted(shard_ids.tolist()) == sorted(owned)


def test_the_fixture_holds_string_ids_in_the_old_buckets_only():
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(FIXTURE))
    saved = {b: reader.get_tensor(f"words/rows/bucket_{b:02d}/keys").tolist() for b in range(keys.NUM_SAVE_BUCKETS)}
    assert sum(len(ids) for ids in saved.values()) == len(STRING_IDS)
    assert all(not saved[b] for b in range(32, 64))
    # Today's hash puts most of them in another bucket: the restore must move them.
    new = keys.save_bucket(keys.hash64(tf.constant(STRING_IDS))).numpy().tolist()
    moved = sum(new[STRING_IDS.tolist().index(i)] != b for b, ids in saved.items() for i in ids)
    assert moved > len(STRING_IDS) // 2, moved


@pytest.mark.parametrize("num_shards", [1, 2, 3])
def test_a_checkpoint_of_the_older_string_hash_restores_every_row(num_shards):
    expected = np.load(os.path.join(FIXTURE, "expected.npz"))
    with tf.Graph().as_default():
        words, numbers, train, reads = _model(num_shards)
        accumulators = de.table_ops.export_component(words, "slot_accumulator")
        saver = tf.compat.v1.train.Saver(sharded=True)
        with tf.compat.v1.Session() as session:
            saver.restore(session, tf.train.latest_checkpoint(FIXTURE))
            _check_restored(session, words, numbers, reads, expected, accumulators)
            session.run(train)  # training goes on from the restored rows
            assert not np.allclose(session.run(reads[0]), expected["words"])


@pytest.mark.parametrize(("restored_shards", "sharded"), [(1, True), (3, True), (3, False)])
def test_a_checkpoint_of_todays_hash_restores_resharded(tmp_path, restored_shards, sharded):
    with tf.Graph().as_default():
        words, numbers, train, reads = _model(2)
        accumulators = de.table_ops.export_component(words, "slot_accumulator")
        saver = tf.compat.v1.train.Saver(sharded=True)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            for _ in range(3):
                session.run(train)
            rows_words, rows_numbers = session.run(reads)
            ids, values = session.run(accumulators)
            path = saver.save(session, str(tmp_path / "model.ckpt"), global_step=3)
    by_id = dict(zip(ids.tolist(), values, strict=True))
    expected = {
        "words": rows_words,
        "numbers": rows_numbers,
        "accumulators": np.stack([by_id[i] for i in STRING_IDS.tolist()]),
    }
    reader = tf.train.load_checkpoint(path)
    upper = sum(reader.get_variable_to_shape_map()[f"words/rows/bucket_{b:02d}/keys"][0] for b in range(32, 64))
    assert upper > len(STRING_IDS) // 4, upper  # today's hash fills the upper half of the buckets too
    with tf.Graph().as_default():
        words, numbers, train, reads = _model(restored_shards)
        accumulators = de.table_ops.export_component(words, "slot_accumulator")
        saver = tf.compat.v1.train.Saver(sharded=sharded)  # unsharded: one restore op for every shard, as export's
        with tf.compat.v1.Session() as session:
            saver.restore(session, path)
            _check_restored(session, words, numbers, reads, expected, accumulators)
