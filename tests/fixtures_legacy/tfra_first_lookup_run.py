"""A TFRA script whose first lookup is made inside its own ``sess.run(...)`` call prints the rows it read."""

import tensorflow as tf
import tensorflow_recommenders_addons as tfra

de = tfra.dynamic_embedding
with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
    table = de.get_variable("first", dim=2, initializer=0.5)
    print(sess.run(de.embedding_lookup(table, tf.constant([3, 4], tf.int64))).tolist())
