"""A checkpoint of the per-table layout (tests/fixtures/table_checkpoint/v1, made by its make_checkpoint.py at
ps_toolkit 7350a62) restores into today's grouped tables, onto 1, 2 or 3 shards, rows and optimizer slots alike."""

import os

import numpy as np
import pytest
import tensorflow as tf

from ps_toolkit import dynamic_embedding as de

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "table_checkpoint", "v1")
INT_IDS = np.array([1, 2, 3, 400, 5000, -7, 2**62], np.int64)
STRING_IDS = np.array([b"a", b"bb", b"", b"user:42"])


def _model(num_shards: int):
    devices = ["/cpu:0"] * num_shards
    step = tf.compat.v1.train.get_or_create_global_step()
    numbers = de.get_table("numbers", 3, devices=devices)
    words = de.get_table("words", 3, key_dtype=tf.string, admit_after=2, devices=devices)
    loss = tf.reduce_sum(de.lookup(numbers, tf.constant(INT_IDS)) ** 2) + tf.reduce_sum(
        de.lookup(words, tf.constant(STRING_IDS)) ** 2
    )
    train = de.TableOptimizer(tf.compat.v1.train.AdagradOptimizer(0.1)).minimize(loss, global_step=step)
    reads = de.lookup(numbers, tf.constant(INT_IDS)), de.lookup(words, tf.constant(STRING_IDS))
    return numbers, words, train, reads


@pytest.mark.parametrize("num_shards", [1, 2, 3])
def test_a_checkpoint_of_the_per_table_layout_restores_rows_and_slots(num_shards):
    expected = np.load(os.path.join(FIXTURE, "expected.npz"))
    with tf.Graph().as_default():
        numbers, words, train, reads = _model(num_shards)
        accumulators = de.table_ops.export_component(numbers, "slot_accumulator")
        sizes = numbers.size(), words.size()
        saver = tf.compat.v1.train.Saver(sharded=True)
        with tf.compat.v1.Session() as session:
            saver.restore(session, tf.train.latest_checkpoint(FIXTURE))
            rows_numbers, rows_words = session.run(reads)
            np.testing.assert_allclose(rows_numbers, expected["numbers"], rtol=1e-6)
            np.testing.assert_allclose(rows_words, expected["words"], rtol=1e-6)
            assert session.run(sizes) == (len(INT_IDS), len(STRING_IDS))
            ids, values = session.run(accumulators)
            # Adagrad from 0.1: three steps of squared gradients 4 r^2 added to each accumulator.
            assert sorted(ids.tolist()) == sorted(INT_IDS.tolist()) and np.all(values > 0.1)
            session.run(train)  # training goes on from the restored rows
            assert not np.allclose(session.run(reads[0]), expected["numbers"])
