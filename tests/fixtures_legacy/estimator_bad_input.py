"""TF 1.x estimator scripts with a mistake, chosen by the first argument.

three        the input_fn returns three things instead of (features, labels)
coordinator  RunConfig(train_distribute=...) across a TF_CONFIG cluster (the removed distribute coordinator)
caught       the script catches the ValueError a bad TF_CONFIG raises, as it could with TF 1.x
"""

import sys

import tensorflow as tf


def three():
    features = {"x": tf.constant([[1.0], [2.0]])}
    labels = tf.constant([0, 1])
    return features, labels, {"weights": tf.constant([1.0, 1.0])}


case = sys.argv[1]
if case == "caught":
    try:
        tf.estimator.RunConfig()
    except ValueError as err:
        print(f"caught ValueError: {err}")
        sys.exit(0)
config = None
if case == "coordinator":
    config = tf.estimator.RunConfig(train_distribute=tf.distribute.MirroredStrategy())
columns = [tf.feature_column.numeric_column("x")]
estimator = tf.estimator.LinearClassifier(columns, config=config)
estimator.train(three, steps=1)
