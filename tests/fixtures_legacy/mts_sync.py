"""A TF 1.x sync-replicas script on MonitoredTrainingSession whose ps join()s forever.

On TF 1.x its non-chief workers often hung at the end, blocked on a sync
token the stopped chief would never give, and the chief waited 120 s for its
queue runner. Under the compat layer every worker ends by itself.
"""

import tensorflow as tf

flags = tf.app.flags
flags.DEFINE_string("ps_hosts", None, "ps addresses")
flags.DEFINE_string("worker_hosts", None, "worker addresses")
flags.DEFINE_string("job_name", None, "ps or worker")
flags.DEFINE_integer("task_index", 0, "task index")
flags.DEFINE_integer("train_steps", 200, "global steps")
FLAGS = flags.FLAGS


def main(_):
    workers = FLAGS.worker_hosts.split(",")
    cluster = tf.train.ClusterSpec({"ps": FLAGS.ps_hosts.split(","), "worker": workers})
    server = tf.train.Server(cluster, job_name=FLAGS.job_name, task_index=FLAGS.task_index)
    if FLAGS.job_name == "ps":
        server.join()
    is_chief = FLAGS.task_index == 0
    with tf.device(
        tf.train.replica_device_setter(worker_device=f"/job:worker/task:{FLAGS.task_index}", cluster=cluster)
    ):
        global_step = tf.train.get_or_create_global_step()
        weight = tf.get_variable("weight", initializer=0.0)
        loss = tf.square(weight * 2.0 - 6.0)
        optimizer = tf.train.SyncReplicasOptimizer(
            tf.train.GradientDescentOptimizer(0.01), replicas_to_aggregate=len(workers), total_num_replicas=len(workers)
        )
        train_op = optimizer.minimize(loss, global_step=global_step)
    hooks = [optimizer.make_session_run_hook(is_chief), tf.train.StopAtStepHook(last_step=FLAGS.train_steps)]
    step = value = None
    with tf.train.MonitoredTrainingSession(master=server.target, is_chief=is_chief, hooks=hooks) as session:
        while not session.should_stop():
            _, step, value = session.run([train_op, global_step, loss])
    print(f"worker {FLAGS.task_index} done at global step {step}, loss {value:.4f}", flush=True)


if __name__ == "__main__":
    tf.app.run()
