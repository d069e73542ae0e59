"""``tf.contrib.layers``, ``tf.contrib.losses`` and ``tf.contrib.metrics`` names, on TensorFlow 2.21's own code.

The contrib functions took their arguments in another order or under other
names than the tf.compat.v1 functions that replaced them (``losses`` took
``(logits, labels)``, ``metrics`` took ``(predictions, labels)``,
``variance_scaling_initializer`` a ``factor`` and an upper-case ``mode``);
each one here takes the contrib signature and calls the replacement. Layers
are tf.compat.v1.layers (tf-keras) ones, so their variables are named as
those are (``dense/kernel``, not contrib's ``fully_connected/weights``): a
TF 1.x checkpoint of a contrib model does not restore into them.
"""

from __future__ import annotations

import tensorflow as tf

_v1 = tf.compat.v1
# contrib's truncated normal had stddev sqrt(1.3 * factor / n); tf.compat.v1's has sqrt(scale / n) / 0.8796...
_TRUNCATED_NORMAL_CORRECTION = 0.87962566103423978
_ZEROS = _v1.zeros_initializer()  # contrib's default biases_initializer; None means no biases


def variance_scaling_initializer(factor=2.0, mode="FAN_IN", uniform=False, seed=None, dtype=tf.float32):
    """contrib.layers.variance_scaling_initializer: the same distributions, through tf.compat.v1's."""
    if mode not in ("FAN_IN", "FAN_OUT", "FAN_AVG"):
        raise TypeError(f"Unknown mode {mode} [FAN_IN, FAN_OUT, FAN_AVG]")
    if uniform:
        scale, distribution = factor, "uniform"
    else:
        scale, distribution = 1.3 * factor * _TRUNCATED_NORMAL_CORRECTION**2, "truncated_normal"
    return _v1.variance_scaling_initializer(
        scale=scale, mode=mode.lower(), distribution=distribution, seed=seed, dtype=dtype
    )


def xavier_initializer(uniform=True, seed=None, dtype=tf.float32):
    """contrib.layers.xavier_initializer (Glorot): variance scaling with factor 1 over the fans' average."""
    return variance_scaling_initializer(factor=1.0, mode="FAN_AVG", uniform=uniform, seed=seed, dtype=dtype)


def l2_regularizer(scale, scope=None):
    """``scale * tf.nn.l2_loss(weights)``; ``scale`` 0 gives no regularizer (None), as contrib did."""
    if scale < 0:
        raise ValueError(f"Setting a scale less than 0 on a regularizer: {scale}")
    if scale == 0:
        return lambda _weights: None
    return lambda weights: tf.multiply(scale, tf.nn.l2_loss(weights), name=scope or "l2_regularizer")


def l1_regularizer(scale, scope=None):
    if scale < 0:
        raise ValueError(f"Setting a scale less than 0 on a regularizer: {scale}")
    if scale == 0:
        return lambda _weights: None
    return lambda weights: tf.multiply(scale, tf.reduce_sum(tf.abs(weights)), name=scope or "l1_regularizer")


def fully_connected(
    inputs,
    num_outputs,
    activation_fn=tf.nn.relu,
    weights_initializer=None,
    weights_regularizer=None,
    biases_initializer=_ZEROS,
    biases_regularizer=None,
    trainable=True,
    scope=None,
    reuse=None,
    **_unused,
):
    """contrib.layers.fully_connected as a tf.compat.v1.layers.dense (its initializer: contrib's Xavier)."""
    return _v1.layers.dense(
        inputs,
        num_outputs,
        activation=activation_fn,
        use_bias=biases_initializer is not None,
        kernel_initializer=weights_initializer or xavier_initializer(),
        bias_initializer=biases_initializer or _v1.zeros_initializer(),
        kernel_regularizer=weights_regularizer,
        bias_regularizer=biases_regularizer,
        trainable=trainable,
        name=scope,
        reuse=reuse,
    )


def conv2d(
    inputs,
    num_outputs,
    kernel_size,
    stride=1,
    padding="SAME",
    activation_fn=tf.nn.relu,
    weights_initializer=None,
    weights_regularizer=None,
    biases_initializer=_ZEROS,
    trainable=True,
    scope=None,
    reuse=None,
    **_unused,
):
    return _v1.layers.conv2d(
        inputs,
        num_outputs,
        kernel_size,
        strides=stride,
        padding=padding.lower(),
        activation=activation_fn,
        use_bias=biases_initializer is not None,
        kernel_initializer=weights_initializer or xavier_initializer(),
        bias_initializer=biases_initializer or _v1.zeros_initializer(),
        kernel_regularizer=weights_regularizer,
        trainable=trainable,
        name=scope,
        reuse=reuse,
    )


def max_pool2d(inputs, kernel_size, stride=2, padding="VALID", scope=None, **_unused):
    return _v1.layers.max_pooling2d(inputs, kernel_size, stride, padding=padding.lower(), name=scope)


def avg_pool2d(inputs, kernel_size, stride=2, padding="VALID", scope=None, **_unused):
    return _v1.layers.average_pooling2d(inputs, kernel_size, stride, padding=padding.lower(), name=scope)


def dropout(inputs, keep_prob=0.5, noise_shape=None, is_training=True, scope=None, **_unused):
    return _v1.layers.dropout(inputs, rate=1 - keep_prob, noise_shape=noise_shape, training=is_training, name=scope)


def flatten(inputs, scope=None, **_unused):
    return _v1.layers.flatten(inputs, name=scope)


LAYERS = {
    "variance_scaling_initializer": variance_scaling_initializer,
    "xavier_initializer": xavier_initializer,
    "xavier_initializer_conv2d": xavier_initializer,
    "l1_regularizer": l1_regularizer,
    "l2_regularizer": l2_regularizer,
    "fully_connected": fully_connected,
    "linear": lambda inputs, num_outputs, **kwargs: fully_connected(inputs, num_outputs, activation_fn=None, **kwargs),
    "conv2d": conv2d,
    "convolution2d": conv2d,
    "max_pool2d": max_pool2d,
    "avg_pool2d": avg_pool2d,
    "dropout": dropout,
    "flatten": flatten,
    "one_hot_encoding": lambda labels, num_classes, on_value=1.0, off_value=0.0, **_: tf.one_hot(
        labels, num_classes, on_value=on_value, off_value=off_value
    ),
}


LOSSES = {
    "softmax_cross_entropy": lambda logits, onehot_labels, weights=1.0, label_smoothing=0, scope=None: (
        _v1.losses.softmax_cross_entropy(onehot_labels, logits, weights, label_smoothing, scope)
    ),
    "sparse_softmax_cross_entropy": lambda logits, labels, weights=1.0, scope=None: (
        _v1.losses.sparse_softmax_cross_entropy(labels, logits, weights, scope)
    ),
    "sigmoid_cross_entropy": lambda logits, multi_class_labels, weights=1.0, label_smoothing=0, scope=None: (
        _v1.losses.sigmoid_cross_entropy(multi_class_labels, logits, weights, label_smoothing, scope)
    ),
    "mean_squared_error": lambda predictions, labels=None, weights=1.0, scope=None: _v1.losses.mean_squared_error(
        labels, predictions, weights, scope
    ),
    "absolute_difference": lambda predictions, labels=None, weights=1.0, scope=None: _v1.losses.absolute_difference(
        labels, predictions, weights, scope
    ),
    "log_loss": lambda predictions, labels=None, weights=1.0, epsilon=1e-7, scope=None: _v1.losses.log_loss(
        labels, predictions, weights, epsilon, scope
    ),
    "hinge_loss": lambda logits, labels=None, scope=None: _v1.losses.hinge_loss(labels, logits, scope=scope),
    "add_loss": _v1.losses.add_loss,
    "get_losses": _v1.losses.get_losses,
    "get_total_loss": _v1.losses.get_total_loss,
    "get_regularization_losses": _v1.losses.get_regularization_losses,
}


def accuracy(predictions, labels, weights=None, name=None):
    """contrib.metrics.accuracy: the (not streaming) fraction of predictions equal to labels."""
    correct = tf.cast(tf.equal(predictions, labels), tf.float32)
    if weights is None:
        return tf.reduce_mean(correct, name=name)
    weights = tf.cast(weights, tf.float32)
    return tf.math.divide_no_nan(tf.reduce_sum(correct * weights), tf.reduce_sum(weights), name=name)


def _streaming(metric):
    """A contrib ``streaming_*`` metric: ``(predictions, labels, weights=None, ...)`` over the v1 one's
    ``(labels, predictions, weights=None, ...)``."""

    def streaming(predictions, labels, weights=None, **kwargs):
        return metric(labels, predictions, weights, **kwargs)

    streaming.__name__ = f"streaming_{metric.__name__}"
    return streaming


METRICS = {
    "accuracy": accuracy,
    "streaming_accuracy": _streaming(_v1.metrics.accuracy),
    "streaming_auc": _streaming(_v1.metrics.auc),
    "streaming_precision": _streaming(_v1.metrics.precision),
    "streaming_recall": _streaming(_v1.metrics.recall),
    "streaming_mean_squared_error": _streaming(_v1.metrics.mean_squared_error),
    "streaming_mean_absolute_error": _streaming(_v1.metrics.mean_absolute_error),
    "streaming_root_mean_squared_error": _streaming(_v1.metrics.root_mean_squared_error),
    "streaming_mean": _v1.metrics.mean,
    "aggregate_metrics": lambda *pairs: tuple(map(list, zip(*pairs, strict=True))),
    "aggregate_metric_map": lambda names_to_pairs: (
        {name: pair[0] for name, pair in names_to_pairs.items()},
        {name: pair[1] for name, pair in names_to_pairs.items()},
    ),
}
