"""The trainer's model: one variable, so that a session run shows graph mode works."""

import tensorflow as tf


def build():
    return tf.Variable(1.5, name="w")
