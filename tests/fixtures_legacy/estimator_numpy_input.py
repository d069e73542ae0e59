"""input_fns the real Estimator takes and the compat layer must take too: numpy arrays, lists, numbers,
nested tuples, a features dict with int and str keys. Prints each case's final global step."""

import numpy as np
import tensorflow as tf

x = np.array([[1.0], [2.0], [3.0], [4.0]], np.float32)
y = np.array([[2.0], [4.0], [6.0], [8.0]], np.float32)

# The ten-line LinearRegressor: features a dict of numpy arrays, labels a numpy array.
regressor = tf.estimator.LinearRegressor([tf.feature_column.numeric_column("x")])
regressor.train(input_fn=lambda: ({"x": x}, y), steps=5)
print("numpy regressor step", regressor.get_variable_value("global_step"))


def model_fn(features, labels, mode):
    """Uses whatever came: a dict with an int key, a nested tuple of labels, Python numbers."""
    value = tf.reduce_sum(tf.cast(features["x"], tf.float32)) + tf.cast(features[7], tf.float32)
    first, (second, third) = labels
    weight = tf.compat.v1.get_variable("w", [], initializer=tf.compat.v1.zeros_initializer())
    target = tf.cast(first, tf.float32) + tf.reduce_sum(tf.cast(second, tf.float32)) + tf.cast(third, tf.float32)
    loss = tf.square(weight * value - target)
    train_op = tf.compat.v1.train.GradientDescentOptimizer(0.001).minimize(
        loss, global_step=tf.compat.v1.train.get_global_step()
    )
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


custom = tf.estimator.Estimator(model_fn)
custom.train(input_fn=lambda: ({"x": [1.0, 2.0], 7: 3}, (1.0, ([2.0, 3.0], 4))), steps=3)
print("mixed keys and nested labels step", custom.get_variable_value("global_step"))
