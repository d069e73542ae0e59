"""Prefetched rows against rows pulled in the step, on one ps and one worker (``python -m benchmarks.prefetch_rows``).

Both servers run in this process on loopback; the worker trains a table on
the ps (Zipf ids, a learnable target) with plain SGD, alternating the two
ways in repetitions, and reports steps/s, CPU ms per example (the whole
process: the ps's work included) and the AUC of held-out batches read fresh.
"""

import json
import socket
import time

import numpy as np
import tensorflow as tf
from absl import app, flags

from benchmarks import ctr_data
from ps_toolkit.training import sparse_lookup
from ps_toolkit.training.row_prefetch import PrefetchedRows

_STEPS = flags.DEFINE_integer("steps", 300, "Steps per repetition.")
_REPETITIONS = flags.DEFINE_integer("repetitions", 3, "Repetitions of each way.")
_VOCAB = flags.DEFINE_integer("vocab", 1_000_000, "Rows in the table.")
_LEARNING_RATE = flags.DEFINE_float("learning_rate", 0.02, "SGD step on the summed loss.")
BATCH, FIELDS, DIM = 512, 26, 16


def _port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _batches(seed: int, count: int, vocab: int):
    rng = np.random.default_rng(seed)
    truth = np.random.default_rng(0).normal(size=vocab).astype(np.float32)
    for _ in range(count):
        ids = (rng.zipf(1.05, size=(BATCH, FIELDS)) - 1) % vocab
        labels = (truth[ids].sum(axis=1) + rng.normal(size=BATCH) > 0).astype(np.float32)
        yield ids, labels


def _run(target: str, prefetch: bool, seed: int) -> dict:
    graph = tf.Graph()
    with graph.as_default():
        with tf.compat.v1.device("/job:ps/task:0"):
            table = tf.compat.v1.Variable(
                tf.random.normal([_VOCAB.value, DIM], stddev=0.1, seed=3), name="table", use_resource=True
            )
        with tf.compat.v1.device("/job:worker/task:0"):
            ids = tf.compat.v1.placeholder(tf.int64, [BATCH, FIELDS])
            labels = tf.compat.v1.placeholder(tf.float32, [BATCH])
            hidden = tf.compat.v1.Variable(tf.random.normal([FIELDS * DIM, 256], stddev=0.05, seed=1), name="hidden")
            out = tf.compat.v1.Variable(tf.random.normal([256, 1], stddev=0.05, seed=2), name="out")

            def logits_of(rows):
                flat = tf.reshape(rows, [BATCH, FIELDS * DIM])
                return tf.reshape(tf.matmul(tf.nn.relu(tf.matmul(flat, hidden)), out), [BATCH])

            scores = logits_of(sparse_lookup.embedding_lookups([table], [ids])[0])
            optimizer = tf.compat.v1.train.GradientDescentOptimizer(_LEARNING_RATE.value)
            if prefetch:
                cache = PrefetchedRows(table, DIM)
                logits = logits_of(cache.rows())
                loss = tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
                grads = cache.gradients(loss) + optimizer.compute_gradients(loss, [hidden, out])
                refresh, pulled = cache.refresh(ids)
                with tf.control_dependencies([pulled]):
                    step = tf.group(optimizer.apply_gradients(grads), refresh)
                prime, _ = cache.refresh(ids)
            else:
                loss = tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=scores))
                step = optimizer.minimize(loss)
        with tf.compat.v1.Session(target) as session:
            session.run([tf.compat.v1.global_variables_initializer(), tf.compat.v1.local_variables_initializer()])
            data = list(_batches(seed, _STEPS.value + 1, _VOCAB.value))
            if prefetch:
                # The cache holds batch t's rows when batch t+1's ids are fed.
                session.run(prime, {ids: data[0][0]})
                feeds = [{ids: data[t + 1][0], labels: data[t][1]} for t in range(_STEPS.value)]
            else:
                feeds = [{ids: data[t][0], labels: data[t][1]} for t in range(_STEPS.value)]
            for feed in feeds[:20]:
                session.run(step, feed)
            wall, cpu = time.perf_counter(), time.process_time()
            for feed in feeds[20:]:
                session.run(step, feed)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            held_out = list(_batches(10_000 + seed, 10, _VOCAB.value))
            got = [session.run(scores, {ids: i}) for i, _ in held_out]
    measured = _STEPS.value - 20
    auc = ctr_data.auc(np.concatenate([label for _, label in held_out]), np.concatenate(got))
    return {
        "prefetch": prefetch,
        "steps_per_sec": measured / wall,
        "cpu_ms_per_example": 1000 * cpu / (measured * BATCH),
        "auc": auc,
    }


def main(_):
    spec = {"ps": [f"127.0.0.1:{_port()}"], "worker": [f"127.0.0.1:{_port()}"]}
    cluster = tf.train.ClusterSpec(spec)
    tf.distribute.Server(cluster, job_name="ps", task_index=0)
    worker = tf.distribute.Server(cluster, job_name="worker", task_index=0)
    records = []
    for repetition in range(_REPETITIONS.value):
        for prefetch in (False, True):
            records.append(_run(worker.target, prefetch, seed=repetition))
            print(json.dumps(records[-1]), flush=True)
    for prefetch in (False, True):
        mine = [r for r in records if r["prefetch"] == prefetch]
        medians = {k: float(np.median([r[k] for r in mine])) for k in ("steps_per_sec", "cpu_ms_per_example", "auc")}
        print("prefetch" if prefetch else "in-step pull", json.dumps(medians))


if __name__ == "__main__":
    app.run(main)
