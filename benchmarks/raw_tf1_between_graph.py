"""The reference: a plain hand-written TF1 between-graph script, the way users write it, TF's defaults.

replica_device_setter, MonitoredTrainingSession, feed_dict from numpy, a ps
that joins forever. Only the ``protocol`` lines are added, so the harness can time it.

    python -m benchmarks.raw_tf1_between_graph --ps_hosts=... --worker_hosts=... \
        --job_name=worker --task_index=0
"""

import numpy as np
import tensorflow.compat.v1 as tf
from absl import app

from benchmarks import protocol, task_flags
from benchmarks.synthetic import MODELS, make_data

tf.disable_v2_behavior()


def textbook_optimizer(learning_rate: float, num_workers: int, is_chief: bool):
    """The textbook's optimizer and hooks: plain SGD to --train_steps, wrapped in SyncReplicasOptimizer with --sync."""
    optimizer = tf.train.GradientDescentOptimizer(learning_rate)
    hooks = [tf.train.StopAtStepHook(last_step=task_flags.TRAIN_STEPS.value)]
    if task_flags.SYNC.value:
        optimizer = tf.train.SyncReplicasOptimizer(
            optimizer, replicas_to_aggregate=num_workers, total_num_replicas=num_workers
        )
        hooks.append(optimizer.make_session_run_hook(is_chief))
    return optimizer, hooks


def model(images, spec):
    net = images
    for i, units in enumerate(spec.layers):
        weights = tf.get_variable(f"w{i}", [net.shape[-1], units], initializer=tf.glorot_uniform_initializer())
        biases = tf.get_variable(f"b{i}", [units], initializer=tf.zeros_initializer())
        net = tf.matmul(net, weights) + biases
        if i < len(spec.layers) - 1:
            net = tf.nn.relu(net)
    return net


def start_server():
    """(cluster, task index, server) of this worker; a ps serves here forever, as in the textbooks."""
    cluster = tf.train.ClusterSpec(
        {"ps": task_flags.hosts(task_flags.PS_HOSTS), "worker": task_flags.hosts(task_flags.WORKER_HOSTS)}
    )
    job, index = task_flags.JOB_NAME.value, task_flags.TASK_INDEX.value
    server = tf.train.Server(cluster, job_name=job, task_index=index)
    if job == "ps":
        server.join()
    return cluster, index, server


def main(_):
    cluster, index, server = start_server()
    spec = MODELS[task_flags.MODEL.value]
    num_workers = cluster.num_tasks("worker")
    data = make_data()
    is_chief = index == 0
    with tf.device(tf.train.replica_device_setter(worker_device=f"/job:worker/task:{index}", cluster=cluster)):
        images = tf.placeholder(tf.float32, [None, 784])
        labels = tf.placeholder(tf.int64, [None])
        logits = model(images, spec)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
        accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), labels), tf.float32))
        global_step = tf.train.get_or_create_global_step()
        optimizer, hooks = textbook_optimizer(spec.learning_rate, num_workers, is_chief)
        train_op = optimizer.minimize(loss, global_step=global_step)
    test_feed = {images: data.test_images, labels: data.test_labels}
    final = tf.train.FinalOpsHook(accuracy, final_ops_feed_dict=test_feed)
    clock = protocol.StepClock(task_flags.TRAIN_STEPS.value, task_flags.WARMUP_STEPS.value)
    rng = np.random.default_rng(index)
    order, position = rng.permutation(len(data.train_images)), 0
    with tf.train.MonitoredTrainingSession(
        master=server.target, is_chief=is_chief, checkpoint_dir=task_flags.CHECKPOINT_DIR.value, hooks=hooks + [final]
    ) as session:
        while not session.should_stop():
            if position + spec.batch_size > len(order):
                order, position = rng.permutation(len(data.train_images)), 0
            batch = order[position : position + spec.batch_size]
            position += spec.batch_size
            feed = {images: data.train_images[batch], labels: data.train_labels[batch]}
            _, step, loss_value = session.run([train_op, global_step, loss], feed_dict=feed)
            clock.observe(step)
    clock.finish(loss=float(loss_value), accuracy=float(final.final_ops_values))


if __name__ == "__main__":
    app.run(main)
