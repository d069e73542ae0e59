"""The benchmark's embedding model: a 1M x 32 table split over the ps tasks, 20 ids per example, batch 512.

A model_fn and input_fn of the ps_toolkit seam (``--model_fn=benchmarks.embedding_model:model_fn``);
the raw TF1 and TF2 systems build the same graph from ``VOCAB``, ``DIM``, ``IDS_PER_EXAMPLE``.
The ids are drawn from a Zipf-like law, as real feature ids are; an example
is clicked when the mean hidden score of its ids is positive.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

import ps_toolkit
from benchmarks.synthetic import EMBEDDING

VOCAB, DIM, IDS_PER_EXAMPLE = EMBEDDING.vocab, EMBEDDING.dim, EMBEDDING.ids_per_example
BATCH_SIZE, LEARNING_RATE = EMBEDDING.batch_size, EMBEDDING.learning_rate
# Plain SGD in every benchmarked system: TF2's strategy has no TF1 optimizer to share.
OPTIMIZER = "sgd"
NUM_EXAMPLES = 1 << 15


def examples(seed: int, count: int = NUM_EXAMPLES) -> tuple[np.ndarray, np.ndarray]:
    """(ids [count, IDS_PER_EXAMPLE] int64, labels [count] int64)."""
    rng = np.random.default_rng(seed)
    ids = np.minimum(rng.zipf(1.2, size=(count, IDS_PER_EXAMPLE)) - 1, VOCAB - 1).astype(np.int64)
    hidden = np.random.default_rng(7).normal(size=VOCAB).astype(np.float32)
    return ids, (hidden[ids].mean(axis=1) > 0).astype(np.int64)


def input_fn(input_context):
    ids, labels = examples(seed=input_context.input_pipeline_id + 1)
    return (
        tf.data.Dataset.from_tensor_slices(({"ids": ids}, labels))
        .shuffle(4096, seed=input_context.input_pipeline_id)
        .repeat()
        .batch(input_context.get_per_replica_batch_size(), drop_remainder=True)
        .prefetch(2)
    )


def eval_input_fn():
    ids, labels = examples(seed=0, count=4096)
    return tf.data.Dataset.from_tensor_slices(({"ids": ids}, labels)).batch(1024)


def logits_of(table, ids, dense_layer):
    """The model's arithmetic, shared with the raw TF1 script: mean embedding, then a linear layer."""
    return tf.squeeze(dense_layer(tf.reduce_mean(tf.nn.embedding_lookup(table, ids), axis=1)), axis=1)


def model_fn(features, labels, mode, params):
    table = tf.compat.v1.get_variable(
        "embeddings",
        [VOCAB, DIM],
        initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.05),
        partitioner=tf.compat.v1.fixed_size_partitioner(params.get("num_shards", 2)),
    )
    logits = logits_of(table, features["ids"], lambda x: tf.compat.v1.layers.dense(x, 1, name="logit"))
    probability = tf.sigmoid(logits)
    if mode == ps_toolkit.ModeKeys.PREDICT:
        return ps_toolkit.ModelSpec(mode, predictions={"probability": probability})
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.cast(labels, tf.float32), logits=logits))
    metrics = None
    if mode == ps_toolkit.ModeKeys.EVAL:
        clicked = tf.cast(probability > 0.5, tf.int64)
        metrics = {
            "auc": tf.compat.v1.metrics.auc(labels, probability),
            "accuracy": tf.compat.v1.metrics.accuracy(labels, clicked),
        }
    return ps_toolkit.ModelSpec(mode, loss=loss, eval_metric_ops=metrics)
