"""The textbook models as graph-building functions: softmax regression, an MLP, a small CNN.

Each takes flattened 28x28 images and returns logits. Variables are created
with ``tf.compat.v1.get_variable`` so the caller's device function places them
on the parameter servers and an optional partitioner can split large ones.

``near_weights`` runs fully connected layers on the ps task that holds their
weights (Project Adam's placement, OSDI 2014): a step then moves the layer's
input and output activations (batch x units) instead of pulling the weights
and pushing their gradient (units x units). The arithmetic is the same; the ps
does it. ``True`` moves every such layer; a ``layer_placement.near_rule``
decides per layer. Build the gradients with ``colocate_gradients_with_ops=True``
so the backward pass runs there too.
"""

from __future__ import annotations

import contextlib

import tensorflow as tf

from ps_toolkit.data import IMAGE_PIXELS, NUM_CLASSES
from ps_toolkit.errors import ConfigError
from ps_toolkit.train_config import MODEL_NAMES

_glorot = tf.compat.v1.glorot_uniform_initializer


def _dense(inputs, units: int, name: str, partitioner=None, initializer=None, near_weights=False):
    with tf.compat.v1.variable_scope(name):
        weights = tf.compat.v1.get_variable(
            "weights",
            [inputs.shape[-1], units],
            initializer=initializer or _glorot(),
            partitioner=partitioner,
        )
        biases = tf.compat.v1.get_variable("biases", [units], initializer=tf.compat.v1.zeros_initializer())
    fan_in = int(inputs.shape[-1])
    near = near_weights(fan_in, units, weights.dtype.base_dtype.size) if callable(near_weights) else near_weights
    with tf.compat.v1.device(weights.device) if near else contextlib.nullcontext():
        return tf.matmul(inputs, weights) + biases


def softmax_regression(images, partitioner=None, near_weights=False):
    """Mastering TensorFlow ch. 15: one 784x10 layer (zero-initialised, which converges fastest)."""
    return _dense(images, NUM_CLASSES, "softmax", partitioner, tf.compat.v1.zeros_initializer(), near_weights)


def mlp(images, partitioner=None, near_weights=False, hidden=(256, 256)):
    """A fully connected 784-256-256-10 network."""
    net = images
    for i, units in enumerate(hidden):
        net = tf.nn.relu(_dense(net, units, f"hidden{i}", partitioner, near_weights=near_weights))
    return _dense(net, NUM_CLASSES, "logits", partitioner, near_weights=near_weights)


def wide(images, partitioner=None, near_weights=False):
    """784-4096-10: 3.3 M parameters, the size where placement and partitioning matter."""
    return mlp(images, partitioner, near_weights, hidden=(4096,))


def cnn(images, partitioner=None, near_weights=False):
    """Two 5x5 convolutions with max pooling, then 256 hidden units (TF's classic MNIST CNN, narrower)."""
    net = tf.reshape(images, [-1, 28, 28, 1])
    for i, channels in enumerate((16, 32)):
        with tf.compat.v1.variable_scope(f"conv{i}"):
            kernel = tf.compat.v1.get_variable("kernel", [5, 5, net.shape[-1], channels], initializer=_glorot())
            bias = tf.compat.v1.get_variable("bias", [channels], initializer=tf.compat.v1.zeros_initializer())
        net = tf.nn.relu(tf.nn.conv2d(net, kernel, strides=1, padding="SAME") + bias)
        net = tf.nn.max_pool2d(net, ksize=2, strides=2, padding="SAME")
    net = tf.reshape(net, [-1, 7 * 7 * 32])
    # Only the fully connected layers move: a convolution's activations outweigh its kernel.
    net = tf.nn.relu(_dense(net, 256, "fc", partitioner, near_weights=near_weights))
    return _dense(net, NUM_CLASSES, "logits", partitioner, near_weights=near_weights)


MODELS = {"softmax": softmax_regression, "mlp": mlp, "wide": wide, "cnn": cnn}
assert tuple(MODELS) == MODEL_NAMES, "train_config.MODEL_NAMES must list the models"


def build_model(name: str, images, partitioner=None, near_weights=False):
    """Logits of the named model for a [batch, 784] float32 tensor (``near_weights``: see the module doc)."""
    if name not in MODELS:
        raise ConfigError(f"unknown model {name!r} (from --model); valid: {', '.join(MODELS)}")
    if images.shape[-1] != IMAGE_PIXELS:
        raise ValueError(f"model {name} expects {IMAGE_PIXELS} features, got {images.shape[-1]}")
    return MODELS[name](images, partitioner=partitioner, near_weights=near_weights)
