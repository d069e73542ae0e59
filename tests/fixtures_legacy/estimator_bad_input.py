"""A TF 1.x estimator script whose input_fn returns three things instead of (features, labels)."""

import tensorflow as tf


def input_fn():
    features = {"x": tf.constant([[1.0], [2.0]])}
    labels = tf.constant([0, 1])
    return features, labels, {"weights": tf.constant([1.0, 1.0])}


columns = [tf.feature_column.numeric_column("x")]
estimator = tf.estimator.LinearClassifier(columns)
estimator.train(input_fn, steps=1)
