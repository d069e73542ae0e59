"""TF 1.x names of the contrib era and TF internals: all_reduce's shuffle builder, contrib.learn's MNIST loaders,
and the names tf_cnn_benchmarks' TF 1.15 branch reaches where TF 1.x had them (ops.register_tensor_conversion_function,
variables.VariableV1).

run_legacy.py tf1_names_probe.py MNIST_DIR [ring|iris|iris_key]   # the last: a name that is refused
"""

import sys

import tensorflow as tf
import tensorflow.contrib.learn.datasets.mnist as m2
from tensorflow.python.distribute import all_reduce
from tensorflow.python.framework import ops
from tensorflow.python.ops import variables

a = [tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), tf.constant([[10.0, 20.0, 30.0], [40.0, 50.0, 60.0]])]
with tf.device("/cpu:0"):
    # 6 values in 4 shards: 1, 1, 1 and 3.
    out = all_reduce.build_shuffle_all_reduce(a, ["/cpu:0"] * 4, tf.add_n)
with tf.Session() as session:
    print("reduced", [value.tolist() for value in session.run(out)])
d = tf.contrib.learn.datasets.DATASETS["mnist"](sys.argv[1])
print("mnist", d.train.images.shape, d.train.labels.shape, m2.load_mnist(sys.argv[1]).test.num_examples)
print("hasattr", hasattr(all_reduce, "no_such_builder"))


class Box:
    """An object of the script's own that converts to a tensor (as variable_mgr_util's StagedModelVariable)."""

    def __init__(self, tensor):
        self.tensor = tensor


ops.register_tensor_conversion_function(Box, lambda box, dtype=None, name=None, as_ref=False: box.tensor)
counter = variables.VariableV1([1.0, 2.0], trainable=False, collections=[tf.GraphKeys.LOCAL_VARIABLES])
with tf.Session() as session:
    session.run(counter.initializer)
    print("moved", session.run(tf.add(Box(tf.constant([3.0, 4.0])), counter)).tolist(), counter in tf.local_variables())
refused = {
    "ring": lambda: all_reduce.build_ring_all_reduce(a, 1, [0], tf.add),
    "iris": lambda: tf.contrib.learn.datasets.load_dataset("iris"),
    "iris_key": lambda: tf.contrib.learn.datasets.DATASETS["iris"],
}
if len(sys.argv) > 2:
    refused[sys.argv[2]]()
