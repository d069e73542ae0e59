"""The built-in MNIST models as model_fns of the public seam: softmax regression, an MLP, a wide MLP, a CNN.

Design: docs/design.md, "The training seam and the public API".
"""

from __future__ import annotations

import functools

import tensorflow as tf

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.models import mnist_data, mnist_files
from ps_toolkit.models.names import MODEL_NAMES
from ps_toolkit.placement import layers
from ps_toolkit.training.model_api import ModeKeys, ModelDefinition, ModelSpec

# Learning rates that train each model well with plain SGD on MNIST-shaped data.
SGD_LEARNING_RATES = {"softmax": 0.5, "mlp": 0.1, "wide": 0.1, "cnn": 0.05}


def softmax_regression(images):
    """Mastering TensorFlow ch. 15: one 784x10 layer (zero-initialised, which converges fastest)."""
    return layers.dense(images, mnist_files.NUM_CLASSES, "softmax", initializer=tf.compat.v1.zeros_initializer())


def mlp(images, hidden=(256, 256)):
    """A fully connected 784-256-256-10 network."""
    net = images
    for i, units in enumerate(hidden):
        net = tf.nn.relu(layers.dense(net, units, f"hidden{i}"))
    return layers.dense(net, mnist_files.NUM_CLASSES, "logits")


def wide(images):
    """784-4096-10: 3.3 M parameters, the size where placement and partitioning matter."""
    return mlp(images, hidden=(4096,))


def cnn(images):
    """Two 5x5 convolutions with max pooling, then 256 hidden units (TF's classic MNIST CNN, narrower)."""
    glorot = tf.compat.v1.glorot_uniform_initializer
    net = tf.reshape(images, [-1, 28, 28, 1])
    for i, channels in enumerate((16, 32)):
        with tf.compat.v1.variable_scope(f"conv{i}"):
            kernel = tf.compat.v1.get_variable("kernel", [5, 5, net.shape[-1], channels], initializer=glorot())
            bias = tf.compat.v1.get_variable("bias", [channels], initializer=tf.compat.v1.zeros_initializer())
        net = tf.nn.relu(tf.nn.conv2d(net, kernel, strides=1, padding="SAME") + bias)
        net = tf.nn.max_pool2d(net, ksize=2, strides=2, padding="SAME")
    net = tf.reshape(net, [-1, 7 * 7 * 32])
    # Only the fully connected layers can run beside their weights: a convolution's activations outweigh its kernel.
    net = tf.nn.relu(layers.dense(net, 256, "fc"))
    return layers.dense(net, mnist_files.NUM_CLASSES, "logits")


NETWORKS = {"softmax": softmax_regression, "mlp": mlp, "wide": wide, "cnn": cnn}
assert tuple(NETWORKS) == MODEL_NAMES, "names.MODEL_NAMES must list the models"


def classifier_model_fn(features, labels, mode, params):
    """A model_fn for 10-class MNIST over the network ``params["network"]`` names."""
    images = features["image"]
    if images.shape[-1] != mnist_files.IMAGE_PIXELS:
        raise ConfigError(
            f"model {params['network']} expects {mnist_files.IMAGE_PIXELS} features, got {images.shape[-1]}"
        )
    logits = NETWORKS[params["network"]](images)
    classes = tf.argmax(logits, 1)
    predictions = {"classes": classes, "probabilities": tf.nn.softmax(logits)}
    if mode == ModeKeys.PREDICT:
        return ModelSpec(mode, predictions=predictions)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    metrics = {"accuracy": tf.compat.v1.metrics.accuracy(labels, classes)} if mode == ModeKeys.EVAL else None
    return ModelSpec(mode, loss=loss, predictions=predictions, eval_metric_ops=metrics)


def definition(name: str, data_dir: str | None = None, *, seed: int = 0) -> ModelDefinition:
    """Built-in model ``name`` on MNIST from ``data_dir`` (None: the embedded digits), loaded now."""
    if name not in NETWORKS:
        raise ConfigError(f"unknown model {name!r} (from --model); valid: {', '.join(NETWORKS)}")
    splits = mnist_files.load_dataset(data_dir)
    return ModelDefinition(
        model_fn=classifier_model_fn,
        input_fn=functools.partial(mnist_data.train_input_fn, splits, seed=seed),
        eval_input_fn=functools.partial(mnist_data.eval_input_fn, splits),
        params={"network": name},
        name=name,
        default_learning_rates={"sgd": SGD_LEARNING_RATES[name]},
    )
