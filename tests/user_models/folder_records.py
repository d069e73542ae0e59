"""A user model trained on a followed folder of record files, counting in a variable how often each record
was trained on: the checkpoint then shows any record skipped (0) or read twice (2).

Each record is the decimal text of an id below ``params["ids"]``; the input follows ``params["pattern"]``.
"""

import tensorflow as tf

import ps_toolkit


def input_fn(input_context, params):
    records = ps_toolkit.follow_folder(
        params["pattern"], input_context, poll_secs=0.05, on_bad_file=params.get("on_bad_file", "skip")
    )
    ids = records.map(lambda text: tf.strings.to_number(text, tf.int64))
    return ids.map(lambda i: ({"id": i}, tf.cast(i % 2, tf.float32))).batch(params.get("batch", 4))


def model_fn(features, labels, mode, params):
    ids = features["id"]
    weights = tf.compat.v1.get_variable("weights", [params["ids"]], initializer=tf.zeros_initializer())
    prediction = tf.gather(weights, ids)
    if mode == ps_toolkit.ModeKeys.PREDICT:
        return ps_toolkit.ModelSpec(mode, predictions={"y": prediction})
    loss = tf.reduce_mean(tf.square(prediction - labels))
    if mode == ps_toolkit.ModeKeys.TRAIN:
        seen = tf.compat.v1.get_variable(
            "times_trained", [params["ids"]], tf.int32, initializer=tf.zeros_initializer(), trainable=False
        )
        count = tf.compat.v1.scatter_add(seen, ids, tf.ones_like(ids, tf.int32))
        with tf.control_dependencies([count]):
            loss = tf.identity(loss)
    return ps_toolkit.ModelSpec(mode, loss=loss, predictions={"y": prediction})
