"""A TF 1.x script that reports, as one JSON line, which parts of the legacy surface work."""

import json

import tensorflow as tf
from tensorflow.contrib.training import GreedyLoadBalancingStrategy, RandomStrategy, byte_size_load_fn
from tensorflow.examples.tutorials.mnist import input_data

tf.flags.DEFINE_integer("steps", 3, "a flag this script defines")
FLAGS = tf.app.flags.FLAGS


def _error(statement):
    try:
        exec(statement)
    except (AttributeError, ImportError) as err:
        return f"{type(err).__name__}: {err}"
    return None


def main(argv):
    report = {"argv": argv[1:], "steps": FLAGS.steps, "eager": tf.executing_eagerly()}
    images = tf.placeholder(tf.float32, [None, 4])
    report["layers_dense"] = tf.layers.dense(images, 3).shape.as_list()
    report["compat_v1_layers_dense"] = tf.compat.v1.layers.dense(images, 2).shape.as_list()
    report["contrib_training"] = [
        GreedyLoadBalancingStrategy is tf.contrib.training.GreedyLoadBalancingStrategy,
        callable(byte_size_load_fn),
        RandomStrategy(2, seed=1)(images.op) in (0, 1),
    ]
    report["read_data_sets"] = callable(input_data.read_data_sets)
    report["train"] = [
        name
        for name in ("Supervisor", "SyncReplicasOptimizer", "MonitoredTrainingSession", "replica_device_setter")
        if hasattr(tf.train, name)
    ]
    report["errors"] = {
        s: _error(s)
        for s in (
            "tf.contrib.slim",
            "tf.estimator.Estimator",
            "import tensorflow.contrib.rnn",
            "from tensorflow.contrib import seq2seq",
        )
    }
    report["hasattr_contrib_slim"] = hasattr(tf.contrib, "slim")
    print(json.dumps(report))


if __name__ == "__main__":
    tf.app.run()
