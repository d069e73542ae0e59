"""TF 1.x estimator scripts with a mistake, chosen by the first argument.

three        the input_fn returns three things instead of (features, labels)
array        the input_fn returns a numpy array, not tensors
coordinator  RunConfig(train_distribute=...) across a TF_CONFIG cluster (the removed distribute coordinator)
"""

import sys

import numpy as np
import tensorflow as tf


def three():
    features = {"x": tf.constant([[1.0], [2.0]])}
    labels = tf.constant([0, 1])
    return features, labels, {"weights": tf.constant([1.0, 1.0])}


def array():
    return np.zeros((2, 1), np.float32)


case = sys.argv[1]
config = None
if case == "coordinator":
    config = tf.estimator.RunConfig(train_distribute=tf.distribute.MirroredStrategy())
columns = [tf.feature_column.numeric_column("x")]
estimator = tf.estimator.LinearClassifier(columns, config=config)
estimator.train({"three": three, "array": array}.get(case, three), steps=1)
