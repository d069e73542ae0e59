"""ps_toolkit.models.classifiers: where each layer's arithmetic runs."""

import tensorflow as tf

from ps_toolkit.models.classifiers import NETWORKS
from ps_toolkit.placement.near_weights import near_rule, rule_in_effect
from ps_toolkit.training import packed_transfer


def _devices_of(op_type: str, graph) -> set:
    return {op.device for op in graph.get_operations() if op.type == op_type}


def _build(near_weights, model="mlp", packed=False):
    graph = tf.Graph()
    with graph.as_default():
        setter = tf.compat.v1.train.replica_device_setter(ps_tasks=1, worker_device="/job:worker/task:0")
        with tf.compat.v1.device(setter):
            images = tf.compat.v1.placeholder(tf.float32, [None, 784])
            labels = tf.compat.v1.placeholder(tf.int64, [None])
            optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.1)
            colocate = near_weights is not False

            def loss_fn(custom_getter=None):
                rule = near_weights if callable(near_weights) else lambda *_: near_weights
                scope = tf.compat.v1.variable_scope("model", reuse=tf.compat.v1.AUTO_REUSE, custom_getter=custom_getter)
                with scope, rule_in_effect(rule):
                    logits = NETWORKS[model](images)
                return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))

            if packed:
                loss_fn()  # creates the variables the packed pull reads
                variables = tf.compat.v1.trainable_variables()
                _, pairs = packed_transfer.loss_and_gradients(loss_fn, variables)
                optimizer.apply_gradients(pairs)
            else:
                optimizer.minimize(loss_fn(), colocate_gradients_with_ops=colocate)
    return graph


def test_layers_run_on_the_worker_by_default():
    assert _devices_of("MatMul", _build(near_weights=False)) == {"/job:worker/task:0"}


def test_near_weights_runs_forward_and_backward_matmuls_on_the_ps():
    # Forward (3 layers) and backward (weights and inputs gradients) all on the ps:
    # only activations and the input batch cross the network.
    assert _devices_of("MatMul", _build(near_weights=True)) == {"/job:ps/task:0"}


AUTO = near_rule("auto", batch_size=128, num_replicas=2)


def _matmul_devices_by_layer(graph) -> dict:
    """Layer (its forward MatMul's name: MatMul is the first) -> devices of its forward and backward MatMuls."""
    devices: dict = {}
    for op in graph.get_operations():
        if op.type == "MatMul":
            # model/MatMul_1, or gradients/model/MatMul_1_grad/MatMul for its backward pass
            layer = op.name.split("/")[2 if op.name.startswith("gradients/") else 1].removesuffix("_grad")
            devices.setdefault(layer, set()).add(op.device)
    return devices


def test_auto_runs_only_a_large_matrix_beside_its_weights():
    """wide's 784x4096 matrix (12.8 MB) runs on the ps; its 4096x10 logits layer, and all of mlp, on the worker."""
    for packed in (False, True):
        wide = _matmul_devices_by_layer(_build(AUTO, model="wide", packed=packed))
        assert wide == {"MatMul": {"/job:ps/task:0"}, "MatMul_1": {"/job:worker/task:0"}}, (packed, wide)
        assert _devices_of("MatMul", _build(AUTO, model="mlp", packed=packed)) == {"/job:worker/task:0"}


def test_auto_judges_the_bytes_a_step_moves():
    # 784x4096 floats: near moves 5 MB of activations at batch 128 instead of 25.7 MB of matrix and gradient;
    # at batch 512, 20 MB: not worth a hop. A matrix small enough to be packed never moves.
    assert AUTO(784, 4096, 4)
    assert not near_rule("auto", batch_size=512)(784, 4096, 4)
    assert not AUTO(784, 256, 4)
    assert not AUTO(1568, 256, 4)  # the cnn's fc layer: 1.6 MB of matrix, 1.9 MB of activations
    # The matmul belongs on a worker's GPU; a partitioned matrix has no single ps to run beside;
    # a ps serving many replicas would do every one's arithmetic.
    assert not near_rule("auto", batch_size=128, worker_has_gpu=True)(784, 4096, 4)
    assert not near_rule("auto", batch_size=128, partitioned=True)(784, 4096, 4)
    assert not near_rule("auto", batch_size=128, num_replicas=3)(784, 4096, 4)
    assert near_rule("all", batch_size=128, worker_has_gpu=True, num_replicas=8)(784, 10, 4)
    assert not near_rule("none", batch_size=128)(784, 4096, 4)
