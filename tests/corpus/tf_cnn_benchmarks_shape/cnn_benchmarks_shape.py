"""A script of tf_cnn_benchmarks' TF 1.15 branch's shape, written for this corpus (see SOURCE.md).

As tensorflow/benchmarks' cnn_tf_v1.15_compatible scripts/tf_cnn_benchmarks does: absl flags, the TF 1.x
internal modules it imports at the top (all_reduce, ops, variables), a model variable read through a
conversion function registered with ops.register_tensor_conversion_function (variable_mgr_util's
StagedModelVariable), synthetic images in a variables.VariableV1 (models/model.py's get_synthetic_inputs),
--variable_update=parameter_server on a ClusterSpec from --ps_hosts/--worker_hosts, a tf.train.Supervisor's
managed session, warm-up batches, then a ``Step Img/sec total_loss`` table and ``total images/sec: N``.
"""

import time

import numpy as np
import tensorflow.compat.v1 as tf
from absl import app, flags
from tensorflow.python.distribute import all_reduce  # noqa: F401  (imported at the top, as allreduce.py does)
from tensorflow.python.framework import ops
from tensorflow.python.ops import variables as variables_module

flags.DEFINE_string("job_name", "", "One of 'ps', 'worker'.")
flags.DEFINE_integer("task_index", 0, "The task's index in its job.")
flags.DEFINE_string("ps_hosts", "", "Comma-separated parameter servers, host:port.")
flags.DEFINE_string("worker_hosts", "", "Comma-separated workers, host:port.")
flags.DEFINE_string("variable_update", "parameter_server", "Only parameter_server here.")
flags.DEFINE_integer("batch_size", 8, "Images per worker per step.")
flags.DEFINE_integer("num_batches", 20, "Timed batches per worker.")
flags.DEFINE_integer("num_warmup_batches", 2, "Batches before the timing starts.")
flags.DEFINE_integer("display_every", 5, "Print a table row every this many batches.")
FLAGS = flags.FLAGS

IMAGE, CHANNELS, CLASSES = 16, 3, 10


def log_fn(line):
    print(line, flush=True)


class StagedModelVariable:
    """A model variable read through a registered conversion function (variable_mgr_util's class, reduced)."""

    def __init__(self, real_var):
        self.real_var = real_var

    @staticmethod
    def _TensorConversionFunction(self, dtype=None, name=None, as_ref=False):  # noqa: N802 (its name there)
        del dtype, name
        return self.real_var if as_ref else self.real_var.read_value()


ops.register_tensor_conversion_function(StagedModelVariable, StagedModelVariable._TensorConversionFunction)


def get_synthetic_inputs(batch_size):
    """Random images and labels held in local variables, as models/model.py's get_synthetic_inputs."""
    shape = [batch_size, IMAGE, IMAGE, CHANNELS]
    local = [tf.GraphKeys.LOCAL_VARIABLES]
    images = variables_module.VariableV1(tf.random_uniform(shape), trainable=False, collections=local, name="images")
    labels = tf.random_uniform([batch_size], minval=0, maxval=CLASSES, dtype=tf.int32)
    return images, labels


def build_model(images, labels):
    kernel = tf.get_variable("conv0/kernel", [3, 3, CHANNELS, 8])
    conv = tf.nn.relu(tf.nn.conv2d(images, kernel, strides=[1, 2, 2, 1], padding="SAME"))
    flat = tf.reshape(conv, [-1, (IMAGE // 2) * (IMAGE // 2) * 8])
    weights = StagedModelVariable(tf.get_variable("affine0/weights", [(IMAGE // 2) * (IMAGE // 2) * 8, CLASSES]))
    logits = tf.matmul(flat, weights)
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


def get_perf_timing_str(batch_size, step_train_times):
    speeds = [batch_size / t for t in step_train_times]
    mean, uncertainty = np.mean(speeds), np.std(speeds) / np.sqrt(float(len(speeds)))
    jitter = 1.4826 * np.median(np.abs(speeds - np.median(speeds)))
    return "images/sec: %.1f +/- %.1f (jitter = %.1f)" % (mean, uncertainty, jitter)


def main(positional_arguments):
    if len(positional_arguments) > 1:
        raise ValueError("Received unknown positional arguments: %s" % positional_arguments[1:])
    if FLAGS.variable_update != "parameter_server":
        raise ValueError("--variable_update=%s: this script runs parameter_server only" % FLAGS.variable_update)
    workers = FLAGS.worker_hosts.split(",")
    cluster = tf.train.ClusterSpec({"ps": FLAGS.ps_hosts.split(","), "worker": workers})
    server = tf.train.Server(cluster, job_name=FLAGS.job_name, task_index=FLAGS.task_index)
    if FLAGS.job_name == "ps":
        log_fn("Running parameter server %s" % FLAGS.task_index)
        server.join()
        return
    is_chief = FLAGS.task_index == 0
    worker_device = "/job:worker/replica:0/task:%d" % FLAGS.task_index
    with tf.device(tf.train.replica_device_setter(worker_device=worker_device, cluster=cluster)):
        global_step = tf.train.get_or_create_global_step()
        images, labels = get_synthetic_inputs(FLAGS.batch_size)
        loss = build_model(images, labels)
        train_op = tf.train.GradientDescentOptimizer(0.01).minimize(loss, global_step=global_step)
    sv = tf.train.Supervisor(is_chief=is_chief, logdir=None, global_step=global_step, summary_op=None, saver=None)
    with sv.managed_session(master=server.target, start_standard_services=False) as sess:
        for _ in range(FLAGS.num_warmup_batches):
            sess.run(train_op)
        log_fn("Done warm up")
        log_fn("Step\tImg/sec\ttotal_loss")
        step_train_times, loop_start_time = [], time.time()
        for local_step in range(FLAGS.num_batches):
            start = time.time()
            _, loss_value = sess.run([train_op, loss])
            step_train_times.append(time.time() - start)
            if (local_step + 1) % FLAGS.display_every == 0 or local_step == 0:
                timing = get_perf_timing_str(FLAGS.batch_size, step_train_times)
                log_fn("%i\t%s\t%.3f" % (local_step + 1, timing, loss_value))
        elapsed_time = time.time() - loop_start_time
        images_per_sec = FLAGS.num_batches * FLAGS.batch_size * len(workers) / elapsed_time
        log_fn("-" * 64)
        log_fn("total images/sec: %.2f" % images_per_sec)
        log_fn("-" * 64)
    sv.stop()


if __name__ == "__main__":
    tf.disable_v2_behavior()
    app.run(main)
