"""ps_toolkit.models: where each layer's arithmetic runs."""

import tensorflow as tf

from ps_toolkit.models import build_model


def _devices_of(op_type: str, graph) -> set:
    return {op.device for op in graph.get_operations() if op.type == op_type}


def _build(near_weights: bool):
    graph = tf.Graph()
    with graph.as_default():
        setter = tf.compat.v1.train.replica_device_setter(ps_tasks=1, worker_device="/job:worker/task:0")
        with tf.compat.v1.device(setter):
            images = tf.compat.v1.placeholder(tf.float32, [None, 784])
            labels = tf.compat.v1.placeholder(tf.int64, [None])
            logits = build_model("mlp", images, near_weights=near_weights)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
            optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.1)
            optimizer.minimize(loss, colocate_gradients_with_ops=near_weights)
    return graph


def test_layers_run_on_the_worker_by_default():
    assert _devices_of("MatMul", _build(near_weights=False)) == {"/job:worker/task:0"}


def test_near_weights_runs_forward_and_backward_matmuls_on_the_ps():
    # Forward (3 layers) and backward (weights and inputs gradients) all on the ps:
    # only activations and the input batch cross the network.
    assert _devices_of("MatMul", _build(near_weights=True)) == {"/job:ps/task:0"}
