"""TFRA's tables trained by Keras OptimizerV2 optimizers in graph mode, as TFRA's own optimizer tests train them:
the same rows as the optimizer gives a dense variable read by ``embedding_lookup`` (each test fails without the
Keras rules: the optimizer was refused)."""

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.keras import optimizer_v2

from ps_toolkit_compat.tfra import refused

OPTIMIZERS = {
    "sgd": lambda: optimizer_v2.gradient_descent.SGD(0.5),
    "momentum": lambda: optimizer_v2.gradient_descent.SGD(0.5, momentum=0.9, nesterov=True),
    "adam": lambda: optimizer_v2.adam.Adam(0.3),
    "amsgrad": lambda: optimizer_v2.adam.Adam(0.3, amsgrad=True),
    "adagrad": lambda: optimizer_v2.adagrad.Adagrad(0.5),
    "adadelta": lambda: optimizer_v2.adadelta.Adadelta(1.0),
    "adamax": lambda: optimizer_v2.adamax.Adamax(0.3),
    "ftrl": lambda: optimizer_v2.ftrl.Ftrl(0.5, l1_regularization_strength=0.01, beta=0.1),
    "rmsprop": lambda: optimizer_v2.rmsprop.RMSprop(0.1),
    "rmsprop_centered_momentum": lambda: optimizer_v2.rmsprop.RMSprop(0.1, momentum=0.5, centered=True),
}


def _trained(de, make_optimizer, table: bool, steps: int = 6):
    initial = np.array([[0.3, -0.2, 0.5], [0.1, 0.4, -0.6]], np.float32)
    ids = tf.constant([0, 1, 1], tf.int64)
    x = tf.constant([[0.5], [-1.0], [2.0]], tf.float32)
    optimizer = de.DynamicEmbeddingOptimizer(make_optimizer())
    if table:
        params = de.get_variable("keras_rows", dim=3, initializer=1.0, devices=["/CPU:0", "/CPU:0"])
        rows, trainable = de.embedding_lookup(params, ids, return_trainable=True, name="lookup")
        var_list, read = [trainable], lambda: params.lookup(tf.constant([0, 1], tf.int64))
    else:
        dense = tf.Variable(initial)
        rows, var_list, read = tf.nn.embedding_lookup(dense, ids), [dense], lambda: tf.convert_to_tensor(dense)
    loss = tf.reduce_sum(tf.square(tf.matmul(rows, x)))
    step = optimizer.minimize(lambda: loss, lambda: var_list)
    with tf.compat.v1.Session() as session:
        session.run(tf.compat.v1.global_variables_initializer())
        if table:
            session.run(params.upsert(tf.constant([0, 1], tf.int64), initial))
        for _ in range(steps):
            session.run(step)
        return session.run(read())


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_a_keras_optimizer_trains_a_table_as_it_trains_a_dense_variable(de, name):
    with tf.Graph().as_default():
        expected = _trained(de, OPTIMIZERS[name], table=False)
    with tf.Graph().as_default():
        got = _trained(de, OPTIMIZERS[name], table=True)
    assert np.allclose(got, expected, rtol=1e-5, atol=1e-6), (name, got, expected)
    assert not np.allclose(got, [[0.3, -0.2, 0.5], [0.1, 0.4, -0.6]], atol=1e-3)  # the rows did train


def test_a_keras_optimizer_without_a_row_rule_is_one_line(de):
    with pytest.raises(refused.NotServedUseError, match="Nadam; supported: SGD, Adam") as raised:
        de.DynamicEmbeddingOptimizer(optimizer_v2.nadam.Nadam(0.1))
    assert "\n" not in str(raised.value)


def test_tf_keras_legacy_optimizers_train_tables_too(de):
    tf_keras = pytest.importorskip("tf_keras")  # a dependency of the [test] extra's TensorFlow stack
    with tf.Graph().as_default():
        expected = _trained(de, lambda: tf_keras.optimizers.legacy.Adam(0.3), table=False)
    with tf.Graph().as_default():
        got = _trained(de, lambda: tf_keras.optimizers.legacy.Adam(0.3), table=True)
    assert np.allclose(got, expected, rtol=1e-5, atol=1e-6)
