"""``tensorflow.examples.tutorials.mnist.mnist``: the TF 1.x tutorial's model functions, beside ``input_data``.

TF 1.x shipped this module (the "TensorFlow Mechanics 101" model) next to
``input_data``; distributed examples import ``inference``, ``loss``,
``training`` and ``evaluation`` from it. Written here against tf.compat.v1 with
the tutorial's signatures and variable names (``hidden1/weights``, ...), so its
checkpoints keep their names.
"""

from __future__ import annotations

import math

import tensorflow as tf

_v1 = tf.compat.v1

NUM_CLASSES = 10
IMAGE_SIZE = 28
IMAGE_PIXELS = IMAGE_SIZE * IMAGE_SIZE


def _layer(inputs, scope: str, fan_in: int, units: int, activation):
    with _v1.name_scope(scope):
        weights = _v1.Variable(
            _v1.truncated_normal([fan_in, units], stddev=1.0 / math.sqrt(float(fan_in))), name="weights"
        )
        biases = _v1.Variable(tf.zeros([units]), name="biases")
        outputs = tf.matmul(inputs, weights) + biases
        return activation(outputs) if activation is not None else outputs


def inference(images, hidden1_units, hidden2_units):
    """Two ReLU layers and a linear one: the logits, [batch, NUM_CLASSES]."""
    hidden1 = _layer(images, "hidden1", IMAGE_PIXELS, hidden1_units, tf.nn.relu)
    hidden2 = _layer(hidden1, "hidden2", hidden1_units, hidden2_units, tf.nn.relu)
    return _layer(hidden2, "softmax_linear", hidden2_units, NUM_CLASSES, None)


def loss(logits, labels):
    """Mean softmax cross entropy of the logits against integer labels."""
    labels = tf.cast(labels, tf.int64)
    return _v1.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)


def training(loss, learning_rate):
    """A gradient descent step on ``loss`` that counts a ``global_step`` variable; logs the loss as a summary."""
    _v1.summary.scalar("loss", loss)
    optimizer = _v1.train.GradientDescentOptimizer(learning_rate)
    global_step = _v1.Variable(0, name="global_step", trainable=False)
    return optimizer.minimize(loss, global_step=global_step)


def evaluation(logits, labels):
    """How many of the batch's labels are the logits' top-1 class."""
    correct = tf.nn.in_top_k(predictions=logits, targets=labels, k=1)
    return tf.reduce_sum(tf.cast(correct, tf.int32))
