"""TF2's ParameterServerStrategy on the embedding model: the table a ShardedVariable over the ps tasks.

Default settings, one step per scheduled function, as ``benchmarks.tf2_pss``
does for the dense models; the same table, ids, batch and plain SGD as the other
systems (``benchmarks.embedding_model``). The ps and worker tasks are plain
``tf.distribute.Server`` processes that join forever.

    python -m benchmarks.tf2_pss_embedding --chief_host=... --ps_hosts=... --worker_hosts=... \
        --job_name=chief
"""

import tensorflow as tf
from absl import app

from benchmarks import embedding_model, task_flags, tf2_pss


def _coordinate() -> None:
    num_ps = len(task_flags.hosts(task_flags.PS_HOSTS))
    partitioner = tf.distribute.experimental.partitioners.FixedShardsPartitioner(num_ps)
    strategy, coordinator = tf2_pss.make_coordinator(partitioner)
    with strategy.scope():
        init = tf.random.truncated_normal([embedding_model.VOCAB, embedding_model.DIM], stddev=0.05, seed=0)
        table = tf.Variable(init, name="embeddings")  # a ShardedVariable: one shard per ps
        weights = tf.Variable(tf.zeros([embedding_model.DIM, 1]), name="logit_w")
        bias = tf.Variable(tf.zeros([1]), name="logit_b")
    # The partitioner shards every variable made in the scope; gradients and updates are per shard.
    variables = [shard for variable in (table, weights, bias) for shard in getattr(variable, "variables", [variable])]

    def logits_of(ids):
        return embedding_model.logits_of(table, ids, lambda x: tf.matmul(x, weights) + bias)

    iterator = tf2_pss.per_worker_batches(
        coordinator, lambda: embedding_model.examples(seed=1), 4096, embedding_model.BATCH_SIZE
    )

    @tf.function
    def train_step(iterator):
        def replica_fn(ids, labels):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(
                    tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.cast(labels, tf.float32), logits=logits_of(ids))
                )
            rate = embedding_model.LEARNING_RATE
            for variable, grad in zip(variables, tape.gradient(loss, variables), strict=True):
                if isinstance(grad, tf.IndexedSlices):  # a table shard: only its rows looked up
                    variable.scatter_sub(tf.IndexedSlices(rate * grad.values, grad.indices, grad.dense_shape))
                else:
                    variable.assign_sub(rate * grad)
            return loss

        ids, labels = next(iterator)
        return strategy.run(replica_fn, args=(ids, labels))

    clock, last = tf2_pss.run_timed(coordinator, train_step, iterator)
    test_ids, test_labels = embedding_model.examples(seed=0, count=4096)
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.cast(logits_of(test_ids) > 0, tf.int64), test_labels), tf.float32))
    clock.finish(loss=float(last.fetch()), accuracy=float(accuracy))


def main(_):
    if task_flags.JOB_NAME.value == "chief":
        _coordinate()
    else:
        tf2_pss.serve()


if __name__ == "__main__":
    app.run(main)
