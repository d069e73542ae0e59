"""A user model whose input is the task's partition of the DataFrame a Spark launch was given (--input_path):
y = 2*x1 - 3*x2 + 1 learned by a linear model; the input_fn prints how many rows its partition holds."""

import tensorflow as tf

import ps_toolkit
from ps_toolkit.backends.spark.partition import partition_dataset, read_partition


def input_fn(input_context):
    rows = len(read_partition()["y"])
    print(f"partition rows: {rows}", flush=True)
    dataset = partition_dataset(label="y").map(lambda features, y: (features, tf.cast(y, tf.float32)))
    return dataset.shuffle(rows).repeat().batch(input_context.get_per_replica_batch_size(), drop_remainder=True)


def model_fn(features, labels, mode, params):
    inputs = tf.stack([tf.cast(features["x1"], tf.float32), tf.cast(features["x2"], tf.float32)], axis=1)
    prediction = tf.squeeze(tf.compat.v1.layers.dense(inputs, 1), axis=1)
    if mode == ps_toolkit.ModeKeys.PREDICT:
        return ps_toolkit.ModelSpec(mode, predictions={"y": prediction})
    loss = tf.reduce_mean(tf.square(prediction - labels))
    return ps_toolkit.ModelSpec(mode, loss=loss, predictions={"y": prediction})
