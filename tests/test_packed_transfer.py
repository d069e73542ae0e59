"""ps_toolkit.training.packed_transfer: one tensor per ps each way, and exactly plain SGD's update."""

import numpy as np
import pytest
import tensorflow as tf

from ps_toolkit.training import packed_transfer


def _model(inputs, partitioner=None):
    with tf.compat.v1.variable_scope("dense", partitioner=partitioner):
        weights = tf.compat.v1.get_variable("w", [4, 3], initializer=tf.compat.v1.random_normal_initializer(seed=1))
        bias = tf.compat.v1.get_variable("b", [3], initializer=tf.compat.v1.constant_initializer(0.5))
    return tf.reduce_sum(tf.square(tf.matmul(inputs, weights) + bias))


def _one_sgd_step(packed: bool, partitioner=None) -> list[np.ndarray]:
    with tf.Graph().as_default():
        inputs = tf.constant(np.arange(8, dtype=np.float32).reshape(2, 4) / 8)
        with tf.compat.v1.variable_scope("model"):
            _model(inputs, partitioner)  # creates the variables
        variables = tf.compat.v1.trainable_variables()
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.1)

        def loss_fn(custom_getter=None):
            with tf.compat.v1.variable_scope("model", reuse=True, custom_getter=custom_getter):
                return _model(inputs, partitioner)

        if packed:
            _, grads_and_vars = packed_transfer.loss_and_gradients(loss_fn, variables)
            train_op = optimizer.apply_gradients(grads_and_vars)
        else:
            train_op = optimizer.minimize(loss_fn())
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(train_op)
            return session.run(variables)


@pytest.mark.parametrize("partitioned", [False, True])
def test_packed_step_is_plain_sgd(partitioned):
    partitioner = tf.compat.v1.fixed_size_partitioner(2) if partitioned else None
    plain, packed = _one_sgd_step(False, partitioner), _one_sgd_step(True, partitioner)
    assert len(plain) == len(packed) == (4 if partitioned else 2)
    for a, b in zip(plain, packed, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    assert not np.allclose(plain[0], _initial_weights(partitioner)[0]), "the step changed nothing"


def _three_sgd_steps(packed_in_loop: bool) -> list[np.ndarray]:
    """Three SGD steps on three batches from tf.data: plain one per run, or packed in one in-graph loop."""
    from ps_toolkit.training import multi_step

    with tf.Graph().as_default():
        batches = tf.data.Dataset.from_tensor_slices(np.arange(24, dtype=np.float32).reshape(3, 2, 4) / 24)
        next_batch = tf.compat.v1.data.make_one_shot_iterator(batches).get_next
        global_step = tf.compat.v1.train.get_or_create_global_step()
        with tf.compat.v1.variable_scope("model"):
            _model(tf.zeros([1, 4]))  # creates the variables
        variables = tf.compat.v1.trainable_variables()
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.1)

        def loss_fn(custom_getter=None):
            with tf.compat.v1.variable_scope("model", reuse=True, custom_getter=custom_getter):
                return _model(next_batch())

        with tf.compat.v1.Session() as session:
            if packed_in_loop:
                step = multi_step.apply_step_fn(
                    optimizer, global_step, lambda: packed_transfer.loss_and_gradients(loss_fn, variables)
                )
                run = multi_step.multi_step(step, 3)
                session.run(tf.compat.v1.global_variables_initializer())
                assert session.run(run.global_step) == 3
            else:
                train_op = optimizer.minimize(loss_fn())
                session.run(tf.compat.v1.global_variables_initializer())
                for _ in range(3):
                    session.run(train_op)
            return session.run(variables)


def test_packed_steps_in_the_in_graph_loop_are_plain_sgd_on_successive_batches():
    plain, looped = _three_sgd_steps(False), _three_sgd_steps(True)
    for a, b in zip(plain, looped, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5)
    assert not np.allclose(plain[0], _initial_weights(None)[0]), "the steps changed nothing"


def _initial_weights(partitioner):
    with tf.Graph().as_default():
        with tf.compat.v1.variable_scope("model"):
            _model(tf.zeros([1, 4]), partitioner)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            return session.run(tf.compat.v1.trainable_variables())


def test_one_tensor_per_ps_each_way():
    graph = tf.Graph()
    with graph.as_default():
        setter = tf.compat.v1.train.replica_device_setter(ps_tasks=2, worker_device="/job:worker/task:0")
        with tf.compat.v1.device(setter):
            inputs = tf.zeros([2, 4])
            with tf.compat.v1.variable_scope("model"):
                for name in ("a", "b"):  # 4 variables, round robin: 2 on each ps
                    with tf.compat.v1.variable_scope(name):
                        _model(inputs)

            def loss_fn(custom_getter=None):
                with tf.compat.v1.variable_scope("model", reuse=True, custom_getter=custom_getter):
                    total = 0.0
                    for name in ("a", "b"):
                        with tf.compat.v1.variable_scope(name):
                            total += _model(inputs)
                    return total

            packed_transfer.loss_and_gradients(loss_fn, tf.compat.v1.trainable_variables())
    by_type = {}
    for op in graph.get_operations():
        by_type.setdefault(op.type, []).append(op.device)
    ps_devices = ["/job:ps/task:0", "/job:ps/task:1"]
    assert sorted(d for d in by_type["ConcatV2"] if d.startswith("/job:ps")) == ps_devices  # pulls packed on the ps
    assert sorted(d for d in by_type["SplitV"] if d.startswith("/job:ps")) == ps_devices  # pushes split on the ps
    # Every model MatMul reads pulled values on the worker, not the variables on the ps.
    assert {d for d in by_type["MatMul"]} == {"/job:worker/task:0"}


def test_large_variables_are_not_pulled(monkeypatch):
    # A 4x3 float matrix is 48 bytes: with the limit below it, only the 3 biases of each model are packed;
    # the matrices are read in place by the model, never pulled whole.
    monkeypatch.setattr(packed_transfer, "PACK_LIMIT_BYTES", 40)
    graph = tf.Graph()
    with graph.as_default():
        with tf.compat.v1.variable_scope("model"):
            for name in ("a", "b"):
                with tf.compat.v1.variable_scope(name):
                    _model(tf.zeros([2, 4]))
        values = packed_transfer.pull(tf.compat.v1.trainable_variables())
    assert sorted(values) == ["model/a/dense/b:0", "model/b/dense/b:0"]
    concats = [op for op in graph.get_operations() if op.type == "ConcatV2"]
    assert len(concats) == 1 and len(concats[0].inputs) == 3  # two biases and the axis
