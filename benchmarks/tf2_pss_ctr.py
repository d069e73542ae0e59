"""TF2's ParameterServerStrategy on the ctr model: each table a ShardedVariable over the ps tasks.

Default settings, one step per scheduled function, as ``benchmarks.tf2_pss``
does for the dense models; the same tables, batches (``ctr_data``), MLP and plain
SGD as the other systems. The ps and worker tasks are plain ``tf.distribute.Server``
processes that join forever. After the last step the coordinator scores the
evaluation set and reports its AUC.

    python -m benchmarks.tf2_pss_ctr --chief_host=... --ps_hosts=... --worker_hosts=... --job_name=chief
"""

import tensorflow as tf
from absl import app

from benchmarks import ctr_data, ctr_model, task_flags, tf2_pss
from benchmarks.ctr_data import DENSE_FEATURES, FIELDS, CtrShape


def _table(rows: int, dim: int, name: str):
    def initial_value(partition_shape=None, partition_offset=None):
        del partition_offset  # every row is drawn alike
        return tf.random.truncated_normal(partition_shape or [rows, dim], stddev=ctr_model.INIT_STDDEV)

    return tf.Variable(initial_value, shape=[rows, dim], dtype=tf.float32, name=name)


def _coordinate() -> None:
    num_ps = len(task_flags.hosts(task_flags.PS_HOSTS))
    law, shared = task_flags.CTR_IDS.value, task_flags.CTR_TABLES.value == "shared"
    shape = CtrShape(vocab=task_flags.CTR_VOCAB.value, dim=task_flags.CTR_DIM.value)
    partitioner = tf.distribute.experimental.partitioners.FixedShardsPartitioner(num_ps)
    strategy, coordinator = tf2_pss.make_coordinator(partitioner)
    sizes = (FIELDS * shape.dim + DENSE_FEATURES, *ctr_model.HIDDEN_UNITS, 1)
    with strategy.scope():
        if shared:
            tables = [_table(FIELDS * shape.vocab, shape.dim, "embeddings")]
        else:
            tables = [_table(shape.vocab, shape.dim, f"embeddings_{f}") for f in range(FIELDS)]
        glorot = tf.keras.initializers.GlorotUniform(seed=0)
        layers = {}
        for i, (name, (a, b)) in enumerate(
            zip(("hidden0", "hidden1", "logit"), zip(sizes, sizes[1:], strict=False), strict=True)
        ):
            layers[name] = (tf.Variable(glorot([a, b]), name=f"w{i}"), tf.Variable(tf.zeros([b]), name=f"b{i}"))
    # The partitioner shards the large variables; gradients and updates are per shard.
    dense_vars = [v for pair in layers.values() for v in pair]
    variables = [s for v in (*tables, *dense_vars) for s in getattr(v, "variables", [v])]

    def logits_of(ids, dense):
        if shared:
            rows = tf.nn.embedding_lookup(tables[0], ids + ctr_model.field_offsets(shape.vocab))
        else:
            rows = tf.stack([tf.nn.embedding_lookup(tables[f], ids[:, f]) for f in range(FIELDS)], axis=1)
        return ctr_model.logits_of(rows, dense, lambda x, _units, name: tf.matmul(x, layers[name][0]) + layers[name][1])

    def dataset_fn(input_context):
        return ctr_data.dataset(input_context.input_pipeline_id + 1, law, shape)

    # TF's documented pattern: the input context tells each worker its pipeline, hence its seed.
    iterator = iter(
        coordinator.create_per_worker_dataset(lambda: strategy.distribute_datasets_from_function(dataset_fn))
    )

    @tf.function
    def train_step(iterator):
        def replica_fn(features, labels):
            with tf.GradientTape() as tape:
                logits = logits_of(features["ids"], features["dense"])
                loss = tf.reduce_mean(
                    tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.cast(labels, tf.float32), logits=logits)
                )
            rate = ctr_model.LEARNING_RATE
            for variable, grad in zip(variables, tape.gradient(loss, variables), strict=True):
                if isinstance(grad, tf.IndexedSlices):  # a table shard: only its rows looked up
                    variable.scatter_sub(tf.IndexedSlices(rate * grad.values, grad.indices, grad.dense_shape))
                else:
                    variable.assign_sub(rate * grad)
            return loss

        features, labels = next(iterator)
        return strategy.run(replica_fn, args=(features, labels))

    clock, last = tf2_pss.run_timed(coordinator, train_step, iterator)
    features, labels = ctr_data.eval_arrays(law, shape)
    scores = tf.sigmoid(logits_of(tf.constant(features["ids"]), tf.constant(features["dense"]))).numpy()
    clock.finish(loss=float(last.fetch()), auc=ctr_data.auc(labels, scores))


def main(_):
    if task_flags.JOB_NAME.value == "chief":
        _coordinate()
    else:
        tf2_pss.serve()


if __name__ == "__main__":
    app.run(main)
