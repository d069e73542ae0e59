"""A TFRA PS-mode script as its users wrote them (TF1 graph mode, tasks started by hand), run unchanged.

    python scripts/run_legacy.py tests/fixtures_legacy/tfra_ps.py --ps_hosts=localhost:2220,localhost:2221 \
        --worker_hosts=localhost:2230,localhost:2231 --job_name=ps --task_index=0     # and ps 1, workers 0, 1
    python scripts/launch_local.py --num_ps=2 --num_workers=2 -- python scripts/run_legacy.py \
        tests/fixtures_legacy/tfra_ps.py --checkpoint_dir=/tmp/tfra_ps

A click model over four dynamic embedding tables (in the style of TFRA's
movielens-1m-ps demo, with synthetic data): user ids (int64, Zipf-like, a
timestamp restrict policy), item ids (strings, a frequency restrict policy,
``embedding_lookup_unique``), and two tag lists (``embedding_lookup_sparse`` and
``safe_embedding_lookup_sparse``, some rows empty). Adam through
``DynamicEmbeddingOptimizer``, ``MonitoredTrainingSession``; the chief runs
``restrict`` every --restrict_every steps. After training the chief rebuilds the
model in inference mode on one local device per table shard, restores the last
checkpoint with a ``Saver`` and checks that lookups there insert nothing. Every
task prints one JSON line (``tfra_result``) with what it saw.
"""

import collections
import json
import math

import tensorflow as tf
from tensorflow_recommenders_addons import dynamic_embedding as de

flags = tf.app.flags
flags.DEFINE_string("ps_hosts", "localhost:2220", "ps addresses, comma separated")
flags.DEFINE_string("worker_hosts", "localhost:2230", "worker addresses, comma separated")
flags.DEFINE_string("job_name", "worker", "ps or worker")
flags.DEFINE_integer("task_index", 0, "index of the task in its job")
flags.DEFINE_string("checkpoint_dir", None, "where the chief saves checkpoints")
flags.DEFINE_integer("train_steps", 300, "steps each worker runs")
flags.DEFINE_integer("batch_size", 64, "examples per step")
flags.DEFINE_integer("restrict_every", 100, "the chief restricts the tables every N of its steps")
flags.DEFINE_integer("num_reserved", 400, "rows each restricted table keeps")
FLAGS = flags.FLAGS

DIM = 8
TAG_DIM = 4
VOCABULARY = 5000  # user and item ids are drawn Zipf-like below this


def zipf_like_ids(batch_size, seed):
    """Small ids often, large ids rarely: exp of a uniform draw, as a Zipf distribution would give."""
    draw = tf.random.uniform([batch_size], 0.0, math.log(VOCABULARY), seed=seed)
    return tf.cast(tf.exp(draw), tf.int64)


def make_batch(batch_size, task_index):
    users = zipf_like_ids(batch_size, seed=10 + task_index)
    items = zipf_like_ids(batch_size, seed=20 + task_index)
    # Click when the user id is a multiple of 3 or the item id a multiple of 5: learnable from the rows.
    labels = tf.cast(tf.logical_or(tf.equal(users % 3, 0), tf.equal(items % 5, 0)), tf.float32)
    tags = tf.random.uniform([batch_size, 3], 1, 50, dtype=tf.int64, seed=30 + task_index)
    # Zeros are dropped by from_dense: some rows of ``sparse_tags`` are empty, as real multi-hot features are.
    sparse_tags = tf.sparse.from_dense(tags * tf.cast(tags > 25, tf.int64))
    return users, tf.strings.as_string(items), tf.sparse.from_dense(tags), sparse_tags, labels


def build_model(devices, users, items, tags, sparse_tags):
    """The tables and the network, and the trainable wrapper of the user rows (as TFRA's demos take it)."""
    user_table = de.get_variable(
        "user_embeddings",
        key_dtype=tf.int64,
        value_dtype=tf.float32,
        dim=DIM,
        devices=devices,
        initializer=tf.keras.initializers.RandomNormal(0.0, 0.1),
        restrict_policy=de.TimestampRestrictPolicy,
    )
    item_table = de.get_variable(
        name="item_embeddings",
        key_dtype=tf.string,
        dim=DIM,
        devices=devices,
        initializer=0.0,
        restrict_policy=de.FrequencyRestrictPolicy,
    )
    tag_table = de.get_variable("tag_embeddings", dim=TAG_DIM, devices=devices, initializer=tf.zeros_initializer())
    unique_users, positions = tf.unique(users)
    user_rows, user_trainable = de.embedding_lookup(
        params=user_table, ids=unique_users, name="user-id-weights", return_trainable=True
    )
    user_rows = tf.gather(user_rows, positions)
    item_rows = de.embedding_lookup_unique(item_table, items, name="item-id-weights")
    tag_rows = de.embedding_lookup_sparse(tag_table, tags, None, name="tags", combiner="mean")
    sparse_tag_rows = de.safe_embedding_lookup_sparse(tag_table, sparse_tags, None, name="sparse_tags", combiner="sum")
    features = tf.concat([user_rows, item_rows, tag_rows, sparse_tag_rows], axis=1)
    hidden = tf.layers.dense(features, 16, activation=tf.nn.relu, name="hidden")
    logits = tf.reshape(tf.layers.dense(hidden, 1, name="logits"), [-1])
    tables = {"user": user_table, "item": item_table, "tag": tag_table}
    return tables, logits, user_trainable


def run_ps(server):
    print(json.dumps({"tfra_result": "ps", "task": FLAGS.task_index}), flush=True)
    server.join()


def run_worker(server, cluster, num_ps):
    is_chief = FLAGS.task_index == 0
    devices = [f"/job:ps/replica:0/task:{index}" for index in range(num_ps)]
    worker_device = f"/job:worker/replica:0/task:{FLAGS.task_index}"
    with tf.device(worker_device):
        users, items, tags, sparse_tags, labels = make_batch(FLAGS.batch_size, FLAGS.task_index)
    with tf.device(tf.train.replica_device_setter(worker_device=worker_device, cluster=cluster)):
        tables, logits, user_trainable = build_model(devices, users, items, tags, sparse_tags)
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
        global_step = tf.train.get_or_create_global_step()
        optimizer = de.DynamicEmbeddingOptimizer(tf.train.AdamOptimizer(0.01))
        train_op = optimizer.minimize(loss, global_step=global_step)
        sizes = {name: table.size() for name, table in tables.items()}
        restrict_ops = [
            tables["user"].restrict(FLAGS.num_reserved, trigger=FLAGS.num_reserved),
            tables["item"].restrict(FLAGS.num_reserved, trigger=FLAGS.num_reserved),
        ]
    result = {"tfra_result": "worker", "task": FLAGS.task_index, "first_loss": None, "restricts": []}
    result["trainable_params_is_table"] = user_trainable.params is tables["user"]
    checkpoint_dir = FLAGS.checkpoint_dir if is_chief else None
    own_steps = 0
    recent = collections.deque(maxlen=20)  # the losses of this worker's last 20 steps
    with tf.train.MonitoredTrainingSession(
        master=server.target, is_chief=is_chief, checkpoint_dir=checkpoint_dir, save_checkpoint_steps=100
    ) as session:
        while own_steps < FLAGS.train_steps and not session.should_stop():
            _, step, value, result["sizes"] = session.run([train_op, global_step, loss, sizes])
            own_steps += 1
            if result["first_loss"] is None:
                result["first_loss"] = float(value)
            recent.append(float(value))
            if is_chief and own_steps % FLAGS.restrict_every == 0:
                before, step_before = session.run([sizes, global_step])
                session.run(restrict_ops)
                after, step_after = session.run([sizes, global_step])
                # The other worker's steps between the two reads: each may add a batch of new ids.
                others = int(step_after) - int(step_before)
                result["restricts"].append({"step": int(step), "before": before, "after": after, "others": others})
    result["own_steps"] = own_steps
    result["recent_loss"] = sum(recent) / len(recent)
    if is_chief:
        result["inference"] = check_inference(num_ps)
    print(json.dumps(result, default=int), flush=True)


def check_inference(num_ps):
    """The last checkpoint restored into an inference graph on this process alone: lookups insert nothing."""
    de.enable_inference_mode()
    with tf.Graph().as_default():
        devices = ["/job:localhost/replica:0/task:0/CPU:0"] * num_ps
        users = tf.constant([1, 2, 3, 10**12], tf.int64)  # the last one was never seen
        items = tf.constant(["1", "2", "3", "no such item"])
        tags = tf.sparse.from_dense(tf.constant([[1, 2, 0], [3, 0, 0], [0, 0, 0], [4, 5, 6]], tf.int64))
        tables, logits, _ = build_model(devices, users, items, tags, tags)
        sizes = {name: table.size() for name, table in tables.items()}
        user_rows = de.embedding_lookup(tables["user"], users, name="probe")
        saver = tf.train.Saver()
        with tf.Session() as session:
            saver.restore(session, tf.train.latest_checkpoint(FLAGS.checkpoint_dir))
            restored = session.run(sizes)
            predictions, rows = session.run([logits, user_rows])
            after = session.run(sizes)
    return {
        "restored_sizes": {name: int(value) for name, value in restored.items()},
        "sizes_after_lookups": {name: int(value) for name, value in after.items()},
        "predictions_finite": bool(all(math.isfinite(value) for value in predictions)),
        "known_row_nonzero": bool(abs(rows[0]).sum() > 0),
        "model_mode": de.get_model_mode(),
    }


def main(_):
    ps_hosts = FLAGS.ps_hosts.replace(" ", "").split(",")
    worker_hosts = FLAGS.worker_hosts.replace(" ", "").split(",")
    cluster = tf.train.ClusterSpec({"ps": ps_hosts, "worker": worker_hosts})
    server = tf.train.Server(cluster, job_name=FLAGS.job_name, task_index=FLAGS.task_index)
    if FLAGS.job_name == "ps":
        run_ps(server)
    else:
        run_worker(server, cluster, len(ps_hosts))


if __name__ == "__main__":
    tf.app.run()
