"""The arithmetic of prefetched rows: plain SGD whose rows are one step stale."""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from ps_toolkit.training.row_prefetch import PrefetchedRows

LEARNING_RATE = 0.1
# Batches of ids with repeats and an id every batch touches, so stale and fresh rows differ.
ID_BATCHES = [[0, 3, 3, 5], [3, 1, 5, 5], [5, 0, 2, 3], [3, 3, 4, 0], [1, 5, 3, 2]]


def _stale_sgd(table, scales):
    """NumPy reference: step t's rows are the table before step t-1's update."""
    table = table.copy()
    cached = table[ID_BATCHES[0]].copy()
    for t, ids in enumerate(ID_BATCHES[:-1]):
        grad_rows = 2.0 * cached * scales[t]  # d/d rows of sum(scale * rows**2)
        cached = table[ID_BATCHES[t + 1]].copy()  # pulled during step t, before its push
        np.add.at(table, ids, -LEARNING_RATE * grad_rows)
    return table


def _fresh_sgd(table, scales):
    table = table.copy()
    for t, ids in enumerate(ID_BATCHES[:-1]):
        np.add.at(table, ids, -LEARNING_RATE * 2.0 * table[ids] * scales[t])
    return table


@pytest.mark.parametrize("num_parts", [1, 2])
def test_steps_match_sgd_with_one_step_of_staleness(num_parts):
    rng = np.random.default_rng(7)
    initial = rng.normal(size=(6, 2)).astype(np.float32)
    scales = rng.uniform(0.5, 1.5, size=(len(ID_BATCHES), 4, 2)).astype(np.float32)
    graph = tf.Graph()
    with graph.as_default():
        bounds = [0, 6] if num_parts == 1 else [0, 4, 6]
        parts = [
            tf.compat.v1.Variable(initial[a:b], name=f"part{n}", use_resource=True)
            for n, (a, b) in enumerate(itertools.pairwise(bounds))
        ]
        next_ids = tf.compat.v1.placeholder(tf.int64, [None])
        scale = tf.compat.v1.placeholder(tf.float32, [None, 2])
        prefetch = PrefetchedRows(parts, dim=2)
        loss = tf.reduce_sum(scale * prefetch.rows() ** 2)
        grads = prefetch.gradients(loss)
        refresh, pulled = prefetch.refresh(next_ids)
        with tf.control_dependencies([pulled]):
            push = tf.compat.v1.train.GradientDescentOptimizer(LEARNING_RATE).apply_gradients(grads)
        step = tf.group(push, refresh)
        prime, _ = prefetch.refresh(next_ids)
        with tf.compat.v1.Session() as session:
            session.run([tf.compat.v1.global_variables_initializer(), tf.compat.v1.local_variables_initializer()])
            session.run(prime, {next_ids: ID_BATCHES[0]})
            for t in range(len(ID_BATCHES) - 1):
                session.run(step, {next_ids: ID_BATCHES[t + 1], scale: scales[t]})
            trained = np.concatenate(session.run(parts))
    np.testing.assert_allclose(trained, _stale_sgd(initial, scales), rtol=1e-5, atol=1e-6)
    assert not np.allclose(trained, _fresh_sgd(initial, scales), atol=1e-4)


def test_benchmark_auc_ranks_scores():
    from benchmarks.ctr_data import auc as _auc

    labels = np.array([0, 0, 1, 1], np.float32)
    assert _auc(labels, np.array([0.1, 0.2, 0.3, 0.4])) == 1.0
    assert _auc(labels, np.array([0.4, 0.3, 0.2, 0.1])) == 0.0
    assert _auc(labels, np.array([0.1, 0.3, 0.2, 0.4])) == 0.75
