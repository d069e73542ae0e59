"""A user's click model, defined outside ps_toolkit: an embedding table over 2 ps, a dense layer, Adagrad, AUC.

Synthetic data with a learnable rule: each id has a hidden score, and an
example is clicked when the mean score of its ids plus its dense features is
positive. Each replica draws its own examples (seeded by its input_pipeline_id).
"""

import numpy as np
import tensorflow as tf

import ps_toolkit

IDS_PER_EXAMPLE = 20


def _examples(count: int, vocab: int, seed: int):
    hidden = np.random.default_rng(12345).normal(size=vocab).astype(np.float32)
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, size=(count, IDS_PER_EXAMPLE), dtype=np.int64)
    dense = rng.normal(size=(count, 4)).astype(np.float32)
    score = hidden[ids].mean(axis=1) * 4.0 + dense[:, 0] - 0.5 * dense[:, 1]
    return {"ids": ids, "dense": dense}, (score > 0).astype(np.int64)


def input_fn(input_context):
    features, labels = _examples(4096, 100_000, seed=input_context.input_pipeline_id + 1)
    return (
        tf.data.Dataset.from_tensor_slices((features, labels))
        .shuffle(4096, seed=input_context.input_pipeline_id)
        .repeat()
        .batch(input_context.get_per_replica_batch_size(), drop_remainder=True)
    )


def eval_input_fn():
    features, labels = _examples(2048, 100_000, seed=0)
    return tf.data.Dataset.from_tensor_slices((features, labels)).batch(512)


def model_fn(features, labels, mode, params):
    vocab, dim = params.get("vocab", 100_000), params.get("dim", 8)
    table = tf.compat.v1.get_variable(
        "embeddings",
        [vocab, dim],
        initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.05),
        partitioner=tf.compat.v1.fixed_size_partitioner(2),
    )
    embedded = tf.reduce_mean(tf.nn.embedding_lookup(table, features["ids"]), axis=1)
    net = tf.concat([embedded, features["dense"]], axis=1)
    hidden = tf.compat.v1.layers.dense(net, 16, activation=tf.nn.relu)
    logits = tf.squeeze(tf.compat.v1.layers.dense(hidden, 1), axis=1)
    probabilities = tf.sigmoid(logits)
    predictions = {"probability": probabilities}
    if mode == ps_toolkit.ModeKeys.PREDICT:
        return ps_toolkit.ModelSpec(mode, predictions=predictions)
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.cast(labels, tf.float32), logits=logits))
    metrics = {"auc": tf.compat.v1.metrics.auc(labels, probabilities)} if mode == ps_toolkit.ModeKeys.EVAL else None
    return ps_toolkit.ModelSpec(mode, loss=loss, predictions=predictions, eval_metric_ops=metrics)


def model_fn_without_loss(features, labels, mode, params):
    spec = model_fn(features, labels, mode, params)
    return ps_toolkit.ModelSpec(mode, predictions=spec.predictions)


def input_fn_without_labels(input_context):
    return input_fn(input_context).map(lambda features, labels: features)


def own_train_op_model_fn(features, labels, mode, params):
    """Builds its own optimizer step (plain SGD), which the toolkit runs as it is."""
    spec = model_fn(features, labels, mode, params)
    if mode != ps_toolkit.ModeKeys.TRAIN:
        return spec
    step = tf.compat.v1.train.GradientDescentOptimizer(0.5).minimize(
        spec.loss, global_step=tf.compat.v1.train.get_global_step()
    )
    return ps_toolkit.ModelSpec(mode, loss=spec.loss, train_op=step)
