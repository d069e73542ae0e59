"""Mastering TensorFlow ch. 15: MNIST softmax regression, between-graph, asynchronous updates (TF 1.x style).

    python scripts/launch_local.py --num_ps=1 --num_workers=2 --success_policy=all_workers --ps_grace_secs=0 \
        -- python scripts/run_legacy.py examples/mnist_softmax_async/mnist_softmax_async.py --n_epochs=200

A TF 1.x script in the book's shape, run unchanged through scripts/run_legacy.py.
The book's known bugs are fixed, each marked "FIX:"; --data_dir defaults to the
embedded digits (1,497 training images, hence --validation_size=0 there).
"""

import os
import sys

import tensorflow as tf
from tensorflow.examples.tutorials.mnist import input_data

EMBEDDED_DIGITS = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "ps_toolkit", "models", "embedded_digits"
)

FLAGS = tf.flags.FLAGS
tf.flags.DEFINE_string("job_name", "ps", "name of the job: ps or worker")
tf.flags.DEFINE_integer("task_index", 0, "index of the task within its job")
tf.flags.DEFINE_string("ps_hosts", "localhost:9001", "comma-separated host:port list of the ps job")
tf.flags.DEFINE_string("worker_hosts", "localhost:9002", "comma-separated host:port list of the worker job")
# FIX: the book hard-codes '/home/armando/datasets/mnist'.
tf.flags.DEFINE_string("data_dir", EMBEDDED_DIGITS, "folder with the four MNIST IDX gzip files")
tf.flags.DEFINE_integer("validation_size", None, "training images held out (default 5000, 0 for the embedded digits)")
tf.flags.DEFINE_integer("n_epochs", 50, "epochs each worker runs over its copy of the training set")


def main(_):
    validation_size = FLAGS.validation_size
    if validation_size is None:
        embedded = os.path.isdir(FLAGS.data_dir) and os.path.samefile(FLAGS.data_dir, EMBEDDED_DIGITS)
        validation_size = 0 if embedded else 5000  # a missing folder: read_data_sets says so in one line
    mnist = input_data.read_data_sets(FLAGS.data_dir, one_hot=True, validation_size=validation_size)

    ps = FLAGS.ps_hosts.split(",")
    workers = FLAGS.worker_hosts.split(",")
    cluster_spec = tf.train.ClusterSpec({"ps": ps, "worker": workers})

    config = tf.ConfigProto()
    config.allow_soft_placement = True

    if FLAGS.job_name == "ps":
        config.device_count["GPU"] = 0
        server = tf.train.Server(cluster_spec, job_name=FLAGS.job_name, task_index=FLAGS.task_index, config=config)
        server.join()  # forever, as in the book: the launcher stops the ps once the workers are done
        sys.exit(0)  # FIX: the book's sys.exit('0') prints '0' and exits with status 1

    config.gpu_options.per_process_gpu_memory_fraction = 0.2
    server = tf.train.Server(cluster_spec, job_name=FLAGS.job_name, task_index=FLAGS.task_index, config=config)
    is_chief = FLAGS.task_index == 0

    worker_device = f"/job:worker/task:{FLAGS.task_index}"
    device_func = tf.train.replica_device_setter(worker_device=worker_device, cluster=cluster_spec)
    with tf.device(device_func):
        global_step = tf.train.get_or_create_global_step()
        x_test = mnist.test.images
        y_test = mnist.test.labels

        n_outputs = 10
        n_inputs = 784
        learning_rate = 0.01
        n_epochs = FLAGS.n_epochs
        batch_size = 100
        n_batches = int(mnist.train.num_examples / batch_size)
        n_epochs_print = 10

        x_p = tf.placeholder(dtype=tf.float32, name="x_p", shape=[None, n_inputs])
        y_p = tf.placeholder(dtype=tf.float32, name="y_p", shape=[None, n_outputs])
        w = tf.Variable(tf.random_normal([n_inputs, n_outputs], name="w"))
        b = tf.Variable(tf.random_normal([n_outputs], name="b"))
        logits = tf.matmul(x_p, w) + b
        cross_entropy = tf.nn.softmax_cross_entropy_with_logits(labels=y_p, logits=logits)
        loss_op = tf.reduce_mean(cross_entropy)
        optimizer = tf.train.GradientDescentOptimizer(learning_rate)
        train_op = optimizer.minimize(loss_op, global_step=global_step)
        correct_pred = tf.equal(tf.argmax(logits, 1), tf.argmax(y_p, 1))
        accuracy_op = tf.reduce_mean(tf.cast(correct_pred, tf.float32))

    sv = tf.train.Supervisor(is_chief=is_chief, init_op=tf.global_variables_initializer(), global_step=global_step)
    with sv.prepare_or_wait_for_session(server.target) as mts:
        lstep = 0
        for epoch in range(n_epochs):
            for _ in range(n_batches):
                x_batch, y_batch = mnist.train.next_batch(batch_size)
                _, loss, gstep = mts.run([train_op, loss_op, global_step], feed_dict={x_p: x_batch, y_p: y_batch})
                lstep += 1
            if (epoch + 1) % n_epochs_print == 0:
                print(f"worker={FLAGS.task_index},epoch={epoch},global_step={gstep}, local_step={lstep}, loss = {loss}")
        accuracy = mts.run(accuracy_op, feed_dict={x_p: x_test, y_p: y_test})
        print(f"worker={FLAGS.task_index}, final accuracy = {accuracy}")
    # FIX: the book calls sv.stop() outside this branch, where a ps never gets.
    sv.stop()


if __name__ == "__main__":
    tf.app.run()
