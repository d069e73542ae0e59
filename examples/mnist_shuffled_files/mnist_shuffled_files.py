"""The data advice of the seeds: shuffle the list of shard files, then shuffle records, per worker (TF 1.x style).

    python scripts/launch_local.py --num_ps=1 --num_workers=2 --success_policy=all_workers --ps_grace_secs=0 \
        -- python scripts/run_legacy.py examples/mnist_shuffled_files/mnist_shuffled_files.py --train_steps=600

Even a well-shuffled data set on disk makes every worker read the same batch
at the same time if they all read it straight through: the workers then
compute the same gradients. Here each worker lists the shard files in its own
shuffled order and shuffles records with its own seed; it prints a checksum of
its first batch's labels to show that no two workers start alike.
"""

import os
import tempfile

import numpy as np
import tensorflow as tf
from tensorflow.examples.tutorials.mnist import input_data

EMBEDDED_DIGITS = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "ps_toolkit", "models", "embedded_digits"
)
RECORD_BYTES = 1 + 784  # label, then the pixels

flags = tf.app.flags
flags.DEFINE_string("ps_hosts", "127.0.0.1:2222", "comma-separated host:port list of the ps job")
flags.DEFINE_string("worker_hosts", "127.0.0.1:2223,127.0.0.1:2224", "comma-separated host:port list of workers")
flags.DEFINE_string("job_name", "worker", "ps or worker")
flags.DEFINE_integer("task_index", 0, "index of the task within its job")
flags.DEFINE_string("data_dir", EMBEDDED_DIGITS, "folder with the four MNIST IDX gzip files")
flags.DEFINE_integer("num_shards", 8, "training set shard files")
flags.DEFINE_integer("train_steps", 600, "global steps")
FLAGS = flags.FLAGS


def write_shards(images, labels, folder, num_shards):
    """Writes fixed-length records (label byte + 784 pixel bytes) into ``num_shards`` files; returns the pattern."""
    os.makedirs(folder, exist_ok=True)
    records = np.concatenate([labels.reshape(-1, 1), images], axis=1).astype(np.uint8)
    for index, shard in enumerate(np.array_split(records, num_shards)):
        with open(os.path.join(folder, f"train.bin-{index:05d}-of-{num_shards:05d}"), "wb") as handle:
            handle.write(shard.tobytes())
    return os.path.join(folder, "train.bin-*")


def decode(record):
    raw = tf.decode_raw(record, tf.uint8)
    return tf.cast(raw[1:], tf.float32) / 255.0, tf.cast(raw[0], tf.int64)


def worker_input(pattern, seed, batch_size=100):
    files = tf.data.Dataset.list_files(pattern, shuffle=True, seed=seed)  # a shuffled file list, per worker
    records = files.interleave(lambda name: tf.data.FixedLengthRecordDataset(name, RECORD_BYTES), cycle_length=4)
    dataset = records.map(decode).shuffle(1000, seed=seed).repeat().batch(batch_size)  # and shuffled records
    return tf.data.make_one_shot_iterator(dataset).get_next()


class FinalAccuracyHook(tf.train.SessionRunHook):
    """Reads the test accuracy when the session ends (a stopped MonitoredSession runs nothing more)."""

    def __init__(self, accuracy, feed_dict=None):
        self._accuracy, self._feed_dict, self.value = accuracy, feed_dict, None

    def end(self, session):
        self.value = session.run(self._accuracy, feed_dict=self._feed_dict)


def main(_):
    cluster = tf.train.ClusterSpec({"ps": FLAGS.ps_hosts.split(","), "worker": FLAGS.worker_hosts.split(",")})
    server = tf.train.Server(cluster, job_name=FLAGS.job_name, task_index=FLAGS.task_index)
    if FLAGS.job_name == "ps":
        server.join()
        return
    mnist = input_data.read_data_sets(FLAGS.data_dir, validation_size=0, dtype=tf.uint8)
    # Each worker writes the same shards into its own folder: no race on a shared one.
    folder = os.path.join(tempfile.gettempdir(), "mnist_shards_" + server.target.split("//")[-1].replace(":", "_"))
    pattern = write_shards(mnist.train.images, mnist.train.labels, folder, FLAGS.num_shards)
    worker_device = f"/job:worker/task:{FLAGS.task_index}"
    with tf.device(tf.train.replica_device_setter(worker_device=worker_device, cluster=cluster)):
        with tf.device(worker_device):
            images, labels = worker_input(pattern, seed=FLAGS.task_index)
        weights = tf.get_variable("weights", [784, 10], initializer=tf.zeros_initializer())
        biases = tf.get_variable("biases", [10], initializer=tf.zeros_initializer())
        global_step = tf.train.get_or_create_global_step()
        logits = tf.matmul(images, weights) + biases
        loss = tf.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
        train_op = tf.train.GradientDescentOptimizer(0.5).minimize(loss, global_step=global_step)
        test_images = tf.constant(mnist.test.images.reshape(-1, 784) / 255.0, tf.float32)
        test_logits = tf.matmul(test_images, weights) + biases
        accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(test_logits, 1), mnist.test.labels), tf.float32))
    final = FinalAccuracyHook(accuracy)
    hooks = [tf.train.StopAtStepHook(last_step=FLAGS.train_steps), final]
    with tf.train.MonitoredTrainingSession(
        master=server.target, is_chief=FLAGS.task_index == 0, hooks=hooks
    ) as session:
        first = None
        while not session.should_stop():
            _, batch_labels = session.run([train_op, labels])
            if first is None:
                first = batch_labels
                print(f"worker {FLAGS.task_index}: first batch labels checksum {int(np.dot(first, np.arange(100)))}")
    print(f"worker {FLAGS.task_index}: test accuracy {final.value:.4f}")


if __name__ == "__main__":
    tf.app.run()
