"""TF 1.x names of the contrib era and TF internals: all_reduce's shuffle builder, contrib.learn's MNIST loaders.

run_legacy.py tf1_names_probe.py MNIST_DIR [ring|iris|iris_key]   # the last: a name that is refused
"""

import sys

import tensorflow as tf
import tensorflow.contrib.learn.datasets.mnist as m2
from tensorflow.python.distribute import all_reduce

a = [tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), tf.constant([[10.0, 20.0, 30.0], [40.0, 50.0, 60.0]])]
with tf.device("/cpu:0"):
    # 6 values in 4 shards: 1, 1, 1 and 3.
    out = all_reduce.build_shuffle_all_reduce(a, ["/cpu:0"] * 4, tf.add_n)
with tf.Session() as session:
    print("reduced", [value.tolist() for value in session.run(out)])
d = tf.contrib.learn.datasets.DATASETS["mnist"](sys.argv[1])
print("mnist", d.train.images.shape, d.train.labels.shape, m2.load_mnist(sys.argv[1]).test.num_examples)
print("hasattr", hasattr(all_reduce, "no_such_builder"))
refused = {
    "ring": lambda: all_reduce.build_ring_all_reduce(a, 1, [0], tf.add),
    "iris": lambda: tf.contrib.learn.datasets.load_dataset("iris"),
    "iris_key": lambda: tf.contrib.learn.datasets.DATASETS["iris"],
}
if len(sys.argv) > 2:
    refused[sys.argv[2]]()
