"""The reference for the ctr model: a plain TF1 between-graph script, the way the textbooks write it.

replica_device_setter, each table split over the ps tasks by fixed_size_partitioner,
``tf.nn.embedding_lookup`` per field (or once on a table the fields share),
dense layers from ``get_variable``, MonitoredTrainingSession, a ps that joins forever. The
batches come from the same tf.data pipeline as every system's
(``benchmarks.ctr_data``). Only the ``protocol`` lines are added,
so the harness can time it, and the chief's one evaluation: once the global
step passes ``--auc_step`` it scores the evaluation set and prints its AUC.

    python -m benchmarks.raw_tf1_ctr --ps_hosts=... --worker_hosts=... --job_name=worker --task_index=0
"""

import time

import tensorflow.compat.v1 as tf
from absl import app

from benchmarks import ctr_data, ctr_model, protocol, raw_tf1_between_graph, task_flags
from benchmarks.ctr_data import CtrShape

tf.disable_v2_behavior()


def _logits(ids, dense, shape: CtrShape, num_ps: int, shared: bool):
    initializer = tf.truncated_normal_initializer(stddev=ctr_model.INIT_STDDEV)
    num_fields = ctr_model.fields_of(ids)
    if shared:
        table = tf.get_variable(
            "embeddings",
            [num_fields * shape.vocab, shape.dim],
            initializer=initializer,
            partitioner=tf.fixed_size_partitioner(num_ps),
        )
        rows = tf.nn.embedding_lookup(table, ids + ctr_model.field_offsets(shape.vocab, num_fields))
    else:
        fields = []
        for f in range(num_fields):
            table = tf.get_variable(
                f"embeddings_{f}",
                [shape.vocab, shape.dim],
                initializer=initializer,
                partitioner=tf.fixed_size_partitioner(num_ps),
            )
            fields.append(tf.nn.embedding_lookup(table, ids[:, f]))
        rows = tf.stack(fields, axis=1)
    return ctr_model.logits_of(rows, dense, ctr_model.dense_layer)


def build_graph(cluster, index: int, dataset, shared: bool, shape: CtrShape):
    """(train_op, global_step, hooks, eval feeds (ids, dense), eval probability) of worker ``index``."""
    num_workers, is_chief, num_ps = cluster.num_tasks("worker"), index == 0, cluster.num_tasks("ps")
    with tf.device(tf.train.replica_device_setter(worker_device=f"/job:worker/task:{index}", cluster=cluster)):
        features, labels = tf.data.make_one_shot_iterator(dataset).get_next()
        with tf.variable_scope("ctr"):
            logits = _logits(features["ids"], features["dense"], shape, num_ps, shared)
        loss = tf.reduce_mean(
            tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.cast(labels, tf.float32), logits=logits)
        )
        eval_ids = tf.placeholder(tf.int64, [None, ctr_model.fields_of(features["ids"])])
        eval_dense = tf.placeholder(tf.float32, [None, ctr_data.DENSE_FEATURES])
        with tf.variable_scope("ctr", reuse=True):
            eval_probability = tf.sigmoid(_logits(eval_ids, eval_dense, shape, num_ps, shared))
        global_step = tf.train.get_or_create_global_step()
        optimizer, hooks = raw_tf1_between_graph.textbook_optimizer(ctr_model.LEARNING_RATE, num_workers, is_chief)
        train_op = optimizer.minimize(loss, global_step=global_step)
    return train_op, global_step, hooks, (eval_ids, eval_dense), eval_probability


def main(_):
    cluster, index, server = raw_tf1_between_graph.start_server()
    is_chief = index == 0
    law = task_flags.CTR_IDS.value
    shape = CtrShape(vocab=task_flags.CTR_VOCAB.value, dim=task_flags.CTR_DIM.value)
    dataset = ctr_data.dataset(index + 1, law, shape)
    shared = task_flags.CTR_TABLES.value == "shared"
    train_op, global_step, hooks, (eval_ids, eval_dense), eval_probability = build_graph(
        cluster, index, dataset, shared, shape
    )
    eval_features, eval_labels = ctr_data.eval_arrays(law, shape) if is_chief else (None, None)
    clock = protocol.StepClock(task_flags.TRAIN_STEPS.value, task_flags.WARMUP_STEPS.value)
    auc_step = task_flags.AUC_STEP.value
    with tf.train.MonitoredTrainingSession(
        master=server.target, is_chief=is_chief, checkpoint_dir=task_flags.CHECKPOINT_DIR.value, hooks=hooks
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
                # The other worker trained on while this one evaluated: a marker stamped now must carry the
                # global step of now, not the one read before the evaluation (that made the window's steps too many).
                step = session.run(global_step)
            clock.observe(step)
    clock.finish()


if __name__ == "__main__":
    app.run(main)
