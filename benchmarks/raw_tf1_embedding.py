"""The reference for the embedding model: a plain TF1 between-graph script, the way users write it.

replica_device_setter, a table split over the ps tasks by fixed_size_partitioner,
embedding_lookup, MonitoredTrainingSession, feed_dict from numpy, a ps that
joins forever. Only the ``protocol`` lines are added, so the harness can time it.

    python -m benchmarks.raw_tf1_embedding --ps_hosts=... --worker_hosts=... --job_name=worker --task_index=0
"""

import numpy as np
import tensorflow.compat.v1 as tf
from absl import app

from benchmarks import embedding_model, protocol, raw_tf1_between_graph, task_flags

tf.disable_v2_behavior()


def _logit_layer(inputs):
    weights = tf.get_variable("logit_w", [inputs.shape[-1], 1], initializer=tf.glorot_uniform_initializer())
    return tf.matmul(inputs, weights) + tf.get_variable("logit_b", [1], initializer=tf.zeros_initializer())


def main(_):
    cluster, index, server = raw_tf1_between_graph.start_server()
    num_workers, is_chief = cluster.num_tasks("worker"), index == 0
    train_ids, train_labels = embedding_model.examples(seed=index + 1)
    test_ids, test_labels = embedding_model.examples(seed=0, count=4096)
    batch = embedding_model.BATCH_SIZE
    with tf.device(tf.train.replica_device_setter(worker_device=f"/job:worker/task:{index}", cluster=cluster)):
        ids = tf.placeholder(tf.int64, [None, embedding_model.IDS_PER_EXAMPLE])
        labels = tf.placeholder(tf.int64, [None])
        table = tf.get_variable(
            "embeddings",
            [embedding_model.VOCAB, embedding_model.DIM],
            initializer=tf.truncated_normal_initializer(stddev=0.05),
            partitioner=tf.fixed_size_partitioner(cluster.num_tasks("ps")),
        )
        logits = embedding_model.logits_of(table, ids, _logit_layer)
        loss = tf.reduce_mean(
            tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.cast(labels, tf.float32), logits=logits)
        )
        accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.cast(logits > 0, tf.int64), labels), tf.float32))
        global_step = tf.train.get_or_create_global_step()
        optimizer, hooks = raw_tf1_between_graph.textbook_optimizer(
            embedding_model.LEARNING_RATE, num_workers, is_chief
        )
        train_op = optimizer.minimize(loss, global_step=global_step)
    final = tf.train.FinalOpsHook(accuracy, final_ops_feed_dict={ids: test_ids, labels: test_labels})
    clock = protocol.StepClock(task_flags.TRAIN_STEPS.value, task_flags.WARMUP_STEPS.value)
    rng = np.random.default_rng(index)
    order, position = rng.permutation(len(train_ids)), 0
    with tf.train.MonitoredTrainingSession(
        master=server.target, is_chief=is_chief, checkpoint_dir=task_flags.CHECKPOINT_DIR.value, hooks=hooks + [final]
    ) as session:
        while not session.should_stop():
            if position + batch > len(order):
                order, position = rng.permutation(len(train_ids)), 0
            rows = order[position : position + batch]
            position += batch
            _, step, loss_value = session.run(
                [train_op, global_step, loss], feed_dict={ids: train_ids[rows], labels: train_labels[rows]}
            )
            clock.observe(step)
    clock.finish(loss=float(loss_value), accuracy=float(final.final_ops_values))


if __name__ == "__main__":
    app.run(main)
