"""A user model whose input is paced by a file the test writes: it decides how fast the job trains, and so
when it ends, without a timing assertion.

Each batch waits the seconds written in the file ``pace`` beside this module (0 or no file: no wait), read
again for every batch, so a test can hold a job in a phase as long as it watches it, then let it finish. The
test copies this module into a folder of its own, with the pace file, and names it in PYTHONPATH (which
every launcher carries to its tasks, on other nodes too).
"""

import os
import time

import numpy as np
import tensorflow as tf

import ps_toolkit


def _pause(value):
    try:
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "pace"), encoding="ascii") as handle:
            time.sleep(min(float(handle.read().strip() or 0), 5.0))
    except (OSError, ValueError):
        pass
    return value


def input_fn(input_context):
    rng = np.random.default_rng(input_context.input_pipeline_id + 1)
    features = rng.normal(size=(1024, 4)).astype(np.float32)
    labels = features @ np.array([1.0, -2.0, 0.5, 3.0], np.float32)
    batches = tf.data.Dataset.from_tensor_slices((features, labels)).repeat().batch(32, drop_remainder=True)

    def paced(x, y):
        x = tf.numpy_function(_pause, [x], tf.float32, stateful=True)
        return tf.ensure_shape(x, [32, 4]), y

    return batches.map(paced)


def model_fn(features, labels, mode, params):
    prediction = tf.squeeze(tf.compat.v1.layers.dense(features, 1), axis=1)
    if mode == ps_toolkit.ModeKeys.PREDICT:
        return ps_toolkit.ModelSpec(mode, predictions={"y": prediction})
    loss = tf.reduce_mean(tf.square(prediction - labels))
    return ps_toolkit.ModelSpec(mode, loss=loss, predictions={"y": prediction})
