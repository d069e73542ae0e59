"""A model whose every batch is ids never seen before: one dynamic table (dim 8) and a logistic loss.

For ``benchmarks.table_memory_ps`` (``--model_fn=benchmarks.fresh_ids_model:model_fn``). params:
``batch`` (50,000 ids a batch), ``max_rows_per_shard`` (None: the default bound; 0: none).
"""

import tensorflow as tf

import ps_toolkit
from ps_toolkit import dynamic_embedding


def model_fn(features, labels, mode, params):
    bound = (params or {}).get("max_rows_per_shard")
    table = dynamic_embedding.get_table("fresh", 8, max_rows_per_shard=bound)
    logits = tf.reduce_sum(dynamic_embedding.lookup(table, features["id"]), 1)
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
    return ps_toolkit.ModelSpec(mode, loss=loss, predictions={"logit": logits})


def input_fn(input_context, params=None):
    batch = int((params or {}).get("batch", 50_000))
    replica = input_context.input_pipeline_id

    def fresh(index):
        ids = (index * batch + tf.range(batch, dtype=tf.int64)) * 64 + replica  # no two replicas share an id
        return {"id": ids}, tf.cast(ids % 2, tf.float32)

    return tf.data.Dataset.range(2**40).map(fresh)
