"""A TFRA PS script training synchronously: SyncReplicasOptimizer around DynamicEmbeddingOptimizer, run unchanged.

    python scripts/launch_local.py --num_ps=2 --num_workers=2 -- python scripts/run_legacy.py \
        tests/fixtures_legacy/tfra_sync.py --checkpoint_dir=/tmp/tfra_sync

As TFRA's PS demos wrote it: ``tf.compat.v1.train.SyncReplicasOptimizer(
de.DynamicEmbeddingOptimizer(opt), replicas_to_aggregate=<workers>)``, its
``make_session_run_hook`` and a ``MonitoredTrainingSession`` stopped at
--train_steps. Every replica looks up the same ids each step ([1, 2, 2, 3], so id 2
twice) in a table of zeros and adds a dense scalar: the loss is their sum, so
every replica's gradient is 1 per lookup. Aggregated by id once per step (the
mean over the replicas), S sync steps of SGD move row 1 and row 3 by -rate * S and
row 2 by -2 * rate * S, and the scalar by -rate * S; a step applied per replica, or
gradients summed instead of averaged, moves them further. The chief reads rows
and the global step after its session closed (nothing applies updates then) and
prints one JSON line (``tfra_result``); a worker prints its own steps.
"""

import json

import tensorflow as tf
from tensorflow_recommenders_addons import dynamic_embedding as de

flags = tf.app.flags
flags.DEFINE_string("ps_hosts", "localhost:2220", "ps addresses, comma separated")
flags.DEFINE_string("worker_hosts", "localhost:2230", "worker addresses, comma separated")
flags.DEFINE_string("job_name", "worker", "ps or worker")
flags.DEFINE_integer("task_index", 0, "index of the task in its job")
flags.DEFINE_string("checkpoint_dir", None, "where the chief saves checkpoints")
flags.DEFINE_integer("train_steps", 40, "global steps")
flags.DEFINE_float("learning_rate", 0.01, "SGD rate")
FLAGS = flags.FLAGS

IDS = [1, 2, 2, 3]


def run_worker(server, cluster, num_ps, num_workers):
    is_chief = FLAGS.task_index == 0
    devices = [f"/job:ps/replica:0/task:{index}" for index in range(num_ps)]
    worker_device = f"/job:worker/replica:0/task:{FLAGS.task_index}"
    with tf.device(tf.train.replica_device_setter(worker_device=worker_device, cluster=cluster)):
        table = de.get_variable("ids", key_dtype=tf.int64, dim=2, devices=devices, initializer=0.0)
        scale = tf.get_variable("scale", [], initializer=tf.zeros_initializer())
        rows = de.embedding_lookup(table, tf.constant(IDS, tf.int64), name="rows")
        loss = tf.reduce_sum(rows) + scale
        global_step = tf.train.get_or_create_global_step()
        optimizer = tf.compat.v1.train.SyncReplicasOptimizer(
            de.DynamicEmbeddingOptimizer(tf.train.GradientDescentOptimizer(FLAGS.learning_rate)),
            replicas_to_aggregate=num_workers,
            total_num_replicas=num_workers,
        )
        train_op = optimizer.minimize(loss, global_step=global_step)
        probe = de.embedding_lookup(table, tf.constant([1, 2, 3], tf.int64), name="probe")
    hooks = [optimizer.make_session_run_hook(is_chief), tf.train.StopAtStepHook(last_step=FLAGS.train_steps)]
    own_steps = 0
    with tf.train.MonitoredTrainingSession(
        master=server.target,
        is_chief=is_chief,
        checkpoint_dir=FLAGS.checkpoint_dir if is_chief else None,
        hooks=hooks,
    ) as session:
        while not session.should_stop():
            session.run(train_op)
            own_steps += 1
    result = {"tfra_result": "worker", "task": FLAGS.task_index, "own_steps": own_steps}
    if is_chief:
        with tf.Session(server.target) as session:
            values, step, scale_value, size = session.run([probe, global_step, scale, table.size()])
        result.update(rows=values.tolist(), global_step=int(step), scale=float(scale_value), size=int(size))
    print(json.dumps(result), flush=True)


def main(_):
    ps_hosts = FLAGS.ps_hosts.replace(" ", "").split(",")
    worker_hosts = FLAGS.worker_hosts.replace(" ", "").split(",")
    cluster = tf.train.ClusterSpec({"ps": ps_hosts, "worker": worker_hosts})
    server = tf.train.Server(cluster, job_name=FLAGS.job_name, task_index=FLAGS.task_index)
    if FLAGS.job_name == "ps":
        print(json.dumps({"tfra_result": "ps", "task": FLAGS.task_index}), flush=True)
        server.join()
    else:
        run_worker(server, cluster, len(ps_hosts), len(worker_hosts))


if __name__ == "__main__":
    tf.app.run()
