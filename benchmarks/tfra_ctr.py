"""The ctr model as a TFRA user writes it: a ``tfra.dynamic_embedding`` table per field, TF1 parameter servers.

One ``tfra.dynamic_embedding.get_variable`` per field on every ps, ``embedding_lookup``
of each field's unique ids (as TFRA's movielens-1m-ps demo does), the same MLP,
batches (``benchmarks.ctr_data``) and plain SGD as the other systems, through
``DynamicEmbeddingOptimizer``; replica_device_setter, MonitoredTrainingSession, a ps
that joins forever; its tasks started by hand with the demo's flags (``--ps_list``,
``--worker_list``, ``--task_mode``, ``--task_id``, ``--is_chief``). It runs unchanged on
real TFRA (TF 2.15.1 + tensorflow-recommenders-addons 0.7.2, the ``tfra_tf2_15``
system) and on ps_toolkit's compat layer under ``scripts/run_legacy.py`` on TF 2.21
(``ps_toolkit_tfra``). Only the ``protocol`` lines are added, so the harness can time
it, and the chief's one evaluation, as in ``benchmarks.raw_tf1_ctr``.

    python benchmarks/tfra_ctr.py --ps_list=... --worker_list=... --task_mode=worker --task_id=0 --is_chief

``--graph_only``: builds the training graph and its Saver (2 ps devices, no server,
no session) and prints their op count and build seconds on one line instead.
"""

import json
import os
import sys
import time

import tensorflow as tf
import tensorflow_recommenders_addons as tfra

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import ctr_data, protocol  # noqa: E402

tf.compat.v1.disable_v2_behavior()

flags = tf.compat.v1.app.flags
FLAGS = flags.FLAGS
flags.DEFINE_string("ps_list", "localhost:2220,localhost:2221", "Comma-separated ps addresses.")
flags.DEFINE_string("worker_list", "localhost:2230,localhost:2231", "Comma-separated worker addresses.")
flags.DEFINE_string("task_mode", "worker", "ps or worker.")
flags.DEFINE_integer("task_id", 0, "Index of this task in its job.")
flags.DEFINE_bool("is_chief", False, "Whether this worker initializes, saves and restores.")
flags.DEFINE_integer("train_steps", 10**9, "Global steps (the harness stops the run when it has timed it).")
flags.DEFINE_integer("warmup_steps", None, "Global step where timing starts.")
flags.DEFINE_integer("auc_step", None, "The chief evaluates AUC once past this global step.")
flags.DEFINE_string("checkpoint_dir", None, "Where the chief checkpoints.")
flags.DEFINE_string("ctr_ids", "zipf1.05", "The id law (benchmarks.ctr_data.ID_LAWS).")
flags.DEFINE_integer("ctr_vocab", 1_000_000, "Ids per field.")
flags.DEFINE_integer("ctr_dim", 8, "Embedding width.")
flags.DEFINE_integer("ctr_fields", ctr_data.FIELDS, "Fields (tables); another count only with --graph_only.")
flags.DEFINE_bool("graph_only", False, "Build the graph and Saver, print their size, run nothing.")

# benchmarks.ctr_model's sizes and rates (not imported: it needs ps_toolkit).
HIDDEN_UNITS = (64, 32)
LEARNING_RATE = 0.05
INIT_STDDEV = 0.05
GRAPH_PREFIX = "graph_size: "  # benchmarks.graph_size.GRAPH_PREFIX


def dense(inputs, units, name):
    with tf.compat.v1.variable_scope(name):
        weights = tf.compat.v1.get_variable(
            "kernel", [inputs.shape[-1], units], initializer=tf.compat.v1.glorot_uniform_initializer()
        )
        bias = tf.compat.v1.get_variable("bias", [units], initializer=tf.compat.v1.zeros_initializer())
    return tf.matmul(inputs, weights) + bias


def logits_of(tables, ids, dense_features, name):
    rows = []
    for field, table in enumerate(tables):
        unique_ids, index = tf.unique(ids[:, field])
        field_rows = tfra.dynamic_embedding.embedding_lookup(params=table, ids=unique_ids, name=f"{name}_{field}")
        rows.append(tf.gather(field_rows, index))
    net = tf.concat(rows + [dense_features], axis=1)
    with tf.compat.v1.variable_scope("mlp", reuse=tf.compat.v1.AUTO_REUSE):
        for i, units in enumerate(HIDDEN_UNITS):
            net = tf.nn.relu(dense(net, units, f"hidden{i}"))
        return tf.squeeze(dense(net, 1, "logit"), axis=1)


def build_graph(worker_id, num_ps, cluster, dataset):
    ps_devices = [f"/job:ps/replica:0/task:{i}" for i in range(num_ps)]
    with tf.compat.v1.device(f"/job:worker/replica:0/task:{worker_id}"):
        features, labels = tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
    setter = tf.compat.v1.train.replica_device_setter(
        ps_tasks=num_ps, worker_device=f"/job:worker/replica:0/task:{worker_id}", ps_device="/job:ps", cluster=cluster
    )
    with tf.compat.v1.device(setter):
        tables = [
            tfra.dynamic_embedding.get_variable(
                name=f"embeddings_{f}",
                dim=FLAGS.ctr_dim,
                devices=ps_devices,
                initializer=tf.keras.initializers.TruncatedNormal(0.0, INIT_STDDEV),
            )
            for f in range(FLAGS.ctr_fields)
        ]
        logits = logits_of(tables, features["ids"], features["dense"], "train")
        loss = tf.reduce_mean(
            tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.cast(labels, tf.float32), logits=logits)
        )
        eval_ids = tf.compat.v1.placeholder(tf.int64, [None, FLAGS.ctr_fields])
        eval_dense = tf.compat.v1.placeholder(tf.float32, [None, ctr_data.DENSE_FEATURES])
        eval_probability = tf.sigmoid(logits_of(tables, eval_ids, eval_dense, "eval"))
        global_step = tf.compat.v1.train.get_or_create_global_step()
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(LEARNING_RATE)
        optimizer = tfra.dynamic_embedding.DynamicEmbeddingOptimizer(optimizer)
        train_op = optimizer.minimize(loss, global_step=global_step)
    return train_op, global_step, (eval_ids, eval_dense), eval_probability


def graph_only(cluster, num_ps):
    batch = ctr_data.CtrShape.batch_size
    features = {
        "ids": tf.zeros([batch, FLAGS.ctr_fields], tf.int64),
        "dense": tf.zeros([batch, ctr_data.DENSE_FEATURES], tf.float32),
    }
    dataset = tf.data.Dataset.from_tensors((features, tf.zeros([batch], tf.int64))).repeat()
    graph = tf.compat.v1.get_default_graph()
    started = time.perf_counter()
    build_graph(0, num_ps, cluster, dataset)
    tf.compat.v1.train.Saver(sharded=True)
    graph.finalize()  # as MonitoredTrainingSession does before the first step (ps_toolkit reads the lookups then)
    seconds = time.perf_counter() - started
    print(GRAPH_PREFIX + json.dumps({"graph_ops": len(graph.get_operations()), "graph_build_s": round(seconds, 3)}))


def start_worker(worker_id, cluster, server):
    shape = ctr_data.CtrShape(vocab=FLAGS.ctr_vocab, dim=FLAGS.ctr_dim)
    dataset = ctr_data.dataset(worker_id + 1, FLAGS.ctr_ids, shape)
    train_op, global_step, (eval_ids, eval_dense), eval_probability = build_graph(
        worker_id, cluster.num_tasks("ps"), cluster, dataset
    )
    is_chief = FLAGS.is_chief
    eval_features, eval_labels = ctr_data.eval_arrays(FLAGS.ctr_ids, shape) if is_chief else (None, None)
    clock = protocol.StepClock(FLAGS.train_steps, FLAGS.warmup_steps)
    auc_step = FLAGS.auc_step
    hooks = [tf.compat.v1.train.StopAtStepHook(last_step=FLAGS.train_steps)]
    with tf.compat.v1.train.MonitoredTrainingSession(
        master=server.target,
        is_chief=is_chief,
        checkpoint_dir=FLAGS.checkpoint_dir if is_chief else None,
        hooks=hooks,
    ) as session:
        while not session.should_stop():
            _, step = session.run([train_op, global_step])
            if is_chief and auc_step is not None and step >= auc_step:
                auc_step = None
                scores = session.run(
                    eval_probability, {eval_ids: eval_features["ids"], eval_dense: eval_features["dense"]}
                )
                protocol.emit(
                    "evaluated", time=time.time(), global_step=int(step), auc=ctr_data.auc(eval_labels, scores)
                )
                step = session.run(global_step)  # the step of now, for the next marker (raw_tf1_ctr's reason)
            clock.observe(step)
    clock.finish()


def main(argv):
    del argv
    ps_list = FLAGS.ps_list.replace(" ", "").split(",")
    worker_list = FLAGS.worker_list.replace(" ", "").split(",")
    cluster = tf.train.ClusterSpec({"ps": ps_list, "worker": worker_list})
    if FLAGS.graph_only:
        graph_only(cluster, len(ps_list))
        return
    server = tf.distribute.Server(cluster, protocol="grpc", job_name=FLAGS.task_mode, task_index=FLAGS.task_id)
    if FLAGS.task_mode == "ps":
        server.join()
    else:
        start_worker(FLAGS.task_id, cluster, server)


if __name__ == "__main__":
    tf.compat.v1.app.run()
