"""TFRA's movielens-1m-ps demo shape on a real cluster, continuing from a TFRA model_dir (run under run_legacy.py).

    python scripts/launch_local.py --num_ps=3 --num_workers=1 -- python scripts/run_legacy.py \
        tests/fixtures_legacy/tfra_resume_ps.py --model_dir=COPY_OF_A_TFRA_MODEL_DIR --train_steps=40

The chief's MonitoredTrainingSession restores --model_dir's checkpoint (written by real TFRA on
2 ps) into tables sharded over this cluster's ps, trains --train_steps more steps on
tests/fixtures/tfra_checkpoints/tfra_model.py's batches and saves. Every task prints one JSON line
(``tfra_result``); the worker's has the step it restored and its losses.
"""

import json
import os
import sys

import tensorflow as tf
import tensorflow_recommenders_addons as tfra

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "tfra_checkpoints"))
import tfra_model  # noqa: E402

flags = tf.app.flags
flags.DEFINE_string("ps_hosts", "localhost:2220", "ps addresses, comma separated")
flags.DEFINE_string("worker_hosts", "localhost:2230", "worker addresses, comma separated")
flags.DEFINE_string("job_name", "worker", "ps or worker")
flags.DEFINE_integer("task_index", 0, "index of the task in its job")
flags.DEFINE_string("model_dir", None, "the TFRA model_dir the chief restores and saves into")
flags.DEFINE_integer("train_steps", 40, "steps the worker runs")
FLAGS = flags.FLAGS


def main(_):
    ps_hosts = FLAGS.ps_hosts.replace(" ", "").split(",")
    cluster = tf.train.ClusterSpec({"ps": ps_hosts, "worker": FLAGS.worker_hosts.replace(" ", "").split(",")})
    server = tf.train.Server(cluster, job_name=FLAGS.job_name, task_index=FLAGS.task_index)
    if FLAGS.job_name == "ps":
        print(json.dumps({"tfra_result": "ps", "task": FLAGS.task_index}), flush=True)
        server.join()
        return
    devices = [f"/job:ps/replica:0/task:{index}" for index in range(len(ps_hosts))]
    worker_device = f"/job:worker/replica:0/task:{FLAGS.task_index}"
    with tf.device(tf.train.replica_device_setter(worker_device=worker_device, cluster=cluster)):
        model = tfra_model.build(tfra, devices)
    step = tf.train.get_or_create_global_step()
    result = {"tfra_result": "worker", "task": FLAGS.task_index, "shards": len(devices), "losses": []}
    with tf.train.MonitoredTrainingSession(
        master=server.target, is_chief=FLAGS.task_index == 0, checkpoint_dir=FLAGS.model_dir
    ) as session:
        result["restored_step"] = int(session.run(step))
        for i in range(FLAGS.train_steps):
            feed = tfra_model.feed(model, result["restored_step"] + i)
            _, loss = session.run([model["train"], model["loss"]], feed_dict=feed)
            result["losses"].append(float(loss))
        result["sizes"] = [int(size) for size in session.run(model["sizes"])]
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    tf.app.run()
