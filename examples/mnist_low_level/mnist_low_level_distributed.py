"""TensorFlow's low-level distributed MNIST (between-graph, async) in TF 1.x style, run unchanged via run_legacy.

    python scripts/launch_local.py --num_ps=1 --num_workers=2 --success_policy=all_workers --ps_grace_secs=0 \
        -- python scripts/run_legacy.py examples/mnist_low_level/mnist_low_level_distributed.py --train_steps=1000

or one terminal per task, the classic way (ps first):

    python scripts/run_legacy.py examples/mnist_low_level/mnist_low_level_distributed.py --ps_hosts=127.0.0.1:2222 \
        --worker_hosts=127.0.0.1:2223,127.0.0.1:2224 --job_name=ps --task_index=0     # then worker 0 and 1

A 784-128-10 network from tf.layers (legacy Keras), MonitoredTrainingSession,
StopAtStepHook, checkpoints by the chief. The ps join()s forever as in the
original; the launcher stops it once the workers are done.
"""

import os
import tempfile

import tensorflow as tf
from tensorflow.examples.tutorials.mnist import input_data

EMBEDDED_DIGITS = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "ps_toolkit", "models", "embedded_digits"
)

flags = tf.app.flags
flags.DEFINE_string("ps_hosts", "127.0.0.1:2222", "comma-separated host:port list of the ps job")
flags.DEFINE_string("worker_hosts", "127.0.0.1:2223,127.0.0.1:2224", "comma-separated host:port list of workers")
flags.DEFINE_string("job_name", "worker", "ps or worker")
flags.DEFINE_integer("task_index", 0, "index of the task within its job")
flags.DEFINE_string("data_dir", EMBEDDED_DIGITS, "folder with the four MNIST IDX gzip files")
flags.DEFINE_integer("validation_size", 0, "training images held out for validation")
flags.DEFINE_string("checkpoint_dir", None, "shared checkpoint folder (default: a fresh one per cluster)")
flags.DEFINE_integer("train_steps", 1000, "global steps")
flags.DEFINE_integer("batch_size", 100, "examples per worker per step")
flags.DEFINE_float("learning_rate", 0.1, "SGD learning rate")
FLAGS = flags.FLAGS


def build_model(images):
    hidden = tf.layers.dense(images, 128, activation=tf.nn.relu, name="hidden")
    return tf.layers.dense(hidden, 10, name="logits")


class FinalAccuracyHook(tf.train.SessionRunHook):
    """Reads the test accuracy when the session ends (a stopped MonitoredSession runs nothing more)."""

    def __init__(self, accuracy, feed_dict):
        self._accuracy, self._feed_dict, self.value = accuracy, feed_dict, None

    def end(self, session):
        self.value = session.run(self._accuracy, feed_dict=self._feed_dict)


def main(_):
    cluster = tf.train.ClusterSpec({"ps": FLAGS.ps_hosts.split(","), "worker": FLAGS.worker_hosts.split(",")})
    server = tf.train.Server(cluster, job_name=FLAGS.job_name, task_index=FLAGS.task_index)
    if FLAGS.job_name == "ps":
        server.join()
        return
    mnist = input_data.read_data_sets(FLAGS.data_dir, one_hot=False, validation_size=FLAGS.validation_size)
    is_chief = FLAGS.task_index == 0
    checkpoint_dir = FLAGS.checkpoint_dir or os.path.join(
        tempfile.gettempdir(), "mnist_low_level_" + FLAGS.worker_hosts.split(",")[0].replace(":", "_")
    )
    with tf.device(
        tf.train.replica_device_setter(worker_device=f"/job:worker/task:{FLAGS.task_index}", cluster=cluster)
    ):
        images = tf.placeholder(tf.float32, [None, 784], name="images")
        labels = tf.placeholder(tf.int64, [None], name="labels")
        logits = build_model(images)
        loss = tf.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
        global_step = tf.train.get_or_create_global_step()
        train_op = tf.train.GradientDescentOptimizer(FLAGS.learning_rate).minimize(loss, global_step=global_step)
        accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), labels), tf.float32))

    final = FinalAccuracyHook(accuracy, {images: mnist.test.images, labels: mnist.test.labels})
    hooks = [tf.train.StopAtStepHook(last_step=FLAGS.train_steps), final]
    with tf.train.MonitoredTrainingSession(
        master=server.target, is_chief=is_chief, checkpoint_dir=checkpoint_dir if is_chief else None, hooks=hooks
    ) as session:
        local_step = 0
        while not session.should_stop():
            batch_images, batch_labels = mnist.train.next_batch(FLAGS.batch_size)
            _, step, batch_loss = session.run(
                [train_op, global_step, loss], feed_dict={images: batch_images, labels: batch_labels}
            )
            local_step += 1
            if local_step % 200 == 0:
                print(f"worker {FLAGS.task_index}: local step {local_step}, global step {step}, loss {batch_loss:.4f}")
    print(f"worker {FLAGS.task_index}: done after {local_step} local steps, test accuracy {final.value:.4f}")


if __name__ == "__main__":
    tf.app.run()
