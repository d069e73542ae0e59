"""A small image model for ps_toolkit: a CNN in tf.compat.v1.layers on handwritten digits, Adam, accuracy.

Train it on a local cluster of 1 ps and 2 workers (from the repository root):

    PYTHONPATH=examples/digits_cnn python scripts/launch_local.py --model_fn=digits_cnn:model_fn \\
        --input_fn=digits_cnn:input_fn --eval_input_fn=digits_cnn:eval_input_fn --optimizer=adam \\
        --train_steps=600 --batch_size=64

Data: MNIST IDX files from ``params["data_dir"]`` (``--params='{"data_dir": "/data/mnist"}'``),
or by default the 28x28 digits embedded in ps_toolkit. Each worker reads its
own slice of the training images, shuffled with its own seed.
"""

import numpy as np
import tensorflow as tf

import ps_toolkit
from ps_toolkit.models.mnist_files import load_dataset, shard_bounds


def _images(flat: np.ndarray) -> np.ndarray:
    return flat.reshape(-1, 28, 28, 1)


def input_fn(input_context, params):
    data = load_dataset(params.get("data_dir"))
    start, end = shard_bounds(
        len(data.train_images), input_context.num_input_pipelines, input_context.input_pipeline_id
    )
    images, labels = _images(data.train_images[start:end]), data.train_labels[start:end]
    return (
        tf.data.Dataset.from_tensor_slices(({"image": images}, labels))
        .shuffle(len(images), seed=input_context.input_pipeline_id)
        .repeat()
        .batch(input_context.get_per_replica_batch_size(), drop_remainder=True)
    )


def eval_input_fn(params):
    data = load_dataset(params.get("data_dir"))
    return tf.data.Dataset.from_tensor_slices(({"image": _images(data.test_images)}, data.test_labels)).batch(500)


def model_fn(features, labels, mode, params):
    net = features["image"]
    for filters in (16, 32):
        net = tf.compat.v1.layers.conv2d(net, filters, 3, padding="same", activation=tf.nn.relu)
        net = tf.compat.v1.layers.max_pooling2d(net, 2, 2)
    net = tf.compat.v1.layers.flatten(net)
    net = tf.compat.v1.layers.dense(net, 64, activation=tf.nn.relu)
    logits = tf.compat.v1.layers.dense(net, 10)
    classes = tf.argmax(logits, axis=1)
    predictions = {"classes": classes, "probabilities": tf.nn.softmax(logits)}
    if mode == ps_toolkit.ModeKeys.PREDICT:
        return ps_toolkit.ModelSpec(mode, predictions=predictions)
    loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels, logits)
    metrics = {"accuracy": tf.compat.v1.metrics.accuracy(labels, classes)} if mode == ps_toolkit.ModeKeys.EVAL else None
    return ps_toolkit.ModelSpec(mode, loss=loss, predictions=predictions, eval_metric_ops=metrics)
