"""Layers for model_fns that want the toolkit's placement levers (``--compute_near_weights``).

``dense`` is ``tf.compat.v1.layers.dense`` made with ``get_variable``, plus one
thing: when the toolkit's rule says so (``layer_placement``), the matmul runs
on the ps task that holds the weight matrix (Project Adam's placement, OSDI
2014), so a step moves the layer's activations instead of pulling the matrix
and pushing its gradient. The arithmetic is the same; the ps does it. Any
model_fn can use it; outside the toolkit's training graph it is a plain layer.

Example:
    def model_fn(features, labels, mode, params):
        hidden = tf.nn.relu(ps_toolkit.placement.layers.dense(features["x"], 4096, "hidden"))
        logits = ps_toolkit.placement.layers.dense(hidden, 10, "logits")
"""

from __future__ import annotations

import contextlib

import tensorflow as tf

from ps_toolkit.placement import near_weights


def dense(inputs, units: int, name: str, *, initializer=None, partitioner=None):
    """``inputs @ weights + biases`` in variable scope ``name`` (variables ``weights`` and ``biases``).

    The weights take ``initializer`` (default Glorot uniform) and ``partitioner``
    (default: the enclosing variable scope's, e.g. the toolkit's ``--partition_variables``).
    """
    with tf.compat.v1.variable_scope(name):
        weights = tf.compat.v1.get_variable(
            "weights",
            [inputs.shape[-1], units],
            initializer=initializer or tf.compat.v1.glorot_uniform_initializer(),
            partitioner=partitioner,
        )
        biases = tf.compat.v1.get_variable("biases", [units], initializer=tf.compat.v1.zeros_initializer())
    near = near_weights.current_rule()(int(inputs.shape[-1]), units, weights.dtype.base_dtype.size)
    # A partitioned matrix has no one ps to run beside.
    near = near and isinstance(weights, tf.Variable | tf.Tensor)
    with tf.compat.v1.device(weights.device) if near else contextlib.nullcontext():
        return tf.matmul(inputs, weights) + biases
