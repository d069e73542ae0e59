"""A TF 1.x script that uses a tf.contrib module the compat layer does not provide."""

import tensorflow as tf

slim = tf.contrib.slim
print("unreachable", slim)
