"""A TF 1.x script over the tf.contrib names TensorFlow 2.21 still implements, and the MNIST tutorial module.

    python scripts/run_legacy.py uses_contrib.py MNIST_DIR
Trains the tutorial's model for 200 steps with contrib's global step, initializers,
layers, losses and metrics, looks labels up in a contrib lookup table, and prints
each part's result; its last line is the test accuracy.
"""

import sys

import tensorflow as tf
from tensorflow.contrib.learn.python.learn.datasets.mnist import read_data_sets
from tensorflow.examples.tutorials.mnist import mnist

data = read_data_sets(sys.argv[1])
also = tf.contrib.learn.datasets.mnist.read_data_sets(sys.argv[1], one_hot=True)
print("datasets", data.train.num_examples, also.test.labels.shape)

names = tf.constant(["zero", "one", "two"])
table = tf.contrib.lookup.index_table_from_tensor(names, num_oov_buckets=1)
ids = table.lookup(tf.constant(["two", "zero", "many"]))
back = tf.contrib.lookup.index_to_string_table_from_tensor(names).lookup(tf.constant([1], tf.int64))

images = tf.placeholder(tf.float32, [None, mnist.IMAGE_PIXELS])
labels = tf.placeholder(tf.int32, [None])
global_step = tf.contrib.framework.get_or_create_global_step()
with tf.variable_scope("extra"):
    extra = tf.get_variable("w", [mnist.IMAGE_PIXELS, 8], initializer=tf.contrib.layers.variance_scaling_initializer())
hidden = tf.contrib.layers.fully_connected(images, 32, weights_initializer=tf.contrib.layers.xavier_initializer())
contrib_logits = tf.contrib.layers.fully_connected(hidden, 10, activation_fn=None)
contrib_loss = tf.contrib.losses.sparse_softmax_cross_entropy(contrib_logits, labels)
logits = mnist.inference(images, 64, 32)
loss = mnist.loss(logits, labels) + contrib_loss
train_op = tf.train.AdamOptimizer(0.003).minimize(loss, global_step=global_step)
correct = mnist.evaluation(logits, labels)
accuracy, update = tf.contrib.metrics.streaming_accuracy(tf.argmax(logits, 1, output_type=tf.int32), labels)

with tf.Session() as session:
    session.run([tf.global_variables_initializer(), tf.local_variables_initializer(), tf.tables_initializer()])
    print("lookup", session.run(ids).tolist(), session.run(back).tolist())
    print("variables", [v.op.name for v in tf.contrib.framework.get_variables_by_name("w")])
    for _ in range(200):
        batch_images, batch_labels = data.train.next_batch(100)
        session.run(train_op, {images: batch_images, labels: batch_labels})
    feed = {images: data.test.images, labels: data.test.labels}
    session.run(update, feed)
    print("global_step", session.run(global_step), "correct", session.run(correct, feed))
    print(f"test accuracy {session.run(accuracy):.3f}")
