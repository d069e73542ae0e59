"""A click model with two dynamic embedding tables (user ids, item ids): Zipf-distributed ids, new ones arriving.

The data is made in the graph, batch by batch: user and item ids follow a
Zipf law over a vocabulary that grows with the batch index (new ids appear
at the tail as training goes on), and a click is drawn from a hidden
preference of the user for the item's kind (both functions of the ids), so
the tables have something to learn. Nothing to download; every replica
draws its own batches (seeded by its index), batch ``i`` from ``i`` alone, the
indices starting at the global step (``ps_toolkit.batch_indices``): after a
restore (a ps restart) no replica reads a batch the restored model trained on.

params (``--params`` JSON): ``dim`` (8), ``admit_after`` (1), ``evict_after_steps`` (None),
``max_rows_per_shard`` (None: the default bound from the ps's memory), ``first_vocab`` (2000),
``new_ids_per_batch`` (20), ``init_scale`` (0.3).
"""

import tensorflow as tf

import ps_toolkit
from ps_toolkit import dynamic_embedding

DEFAULTS = {
    "dim": 8,
    "admit_after": 1,
    "evict_after_steps": None,
    "max_rows_per_shard": None,
    "first_vocab": 2000,
    "new_ids_per_batch": 20,
    "init_scale": 0.3,
}
EVAL_BATCHES = 10


def _params(params) -> dict:
    return {**DEFAULTS, **dict(params or {})}


def model_fn(features, labels, mode, params):
    p = _params(params)
    policy = {
        "admit_after": p["admit_after"],
        "evict_after_steps": p["evict_after_steps"],
        "max_rows_per_shard": p["max_rows_per_shard"],
        # Rows start large enough for the dot product's gradients to break their symmetry early.
        "initializer": dynamic_embedding.InitialRows("normal", scale=p["init_scale"]),
    }
    users = dynamic_embedding.get_table("user", p["dim"], **policy)
    items = dynamic_embedding.get_table("item", p["dim"], **policy)
    user_rows = dynamic_embedding.lookup(users, features["user"])
    item_rows = dynamic_embedding.lookup(items, features["item"])
    dense = tf.compat.v1.layers.dense(tf.concat([user_rows, item_rows], 1), 1, name="bias")
    logits = tf.reduce_sum(user_rows * item_rows, 1) + tf.squeeze(dense, 1)
    probability = tf.sigmoid(logits)
    if mode == ps_toolkit.ModeKeys.PREDICT:
        return ps_toolkit.ModelSpec(mode, predictions={"probability": probability})
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
    metrics = {
        "auc": tf.compat.v1.metrics.auc(labels, probability),
        "accuracy": tf.compat.v1.metrics.accuracy(labels, tf.cast(probability > 0.5, tf.float32)),
    }
    return ps_toolkit.ModelSpec(mode, loss=loss, predictions={"probability": probability}, eval_metric_ops=metrics)


def _zipf_ids(seed, batch_size: int, vocab) -> tf.Tensor:
    """int64 ids in [1, vocab): P(id) about 1/id (a Zipf law), drawn from a stateless seed."""
    u = tf.random.stateless_uniform([batch_size], seed=seed, dtype=tf.float64)
    return tf.cast(tf.floor(tf.exp(u * tf.math.log(tf.cast(vocab, tf.float64)))), tf.int64)


def _kind(ids: tf.Tensor, buckets: int) -> tf.Tensor:
    return tf.strings.to_hash_bucket_fast(tf.strings.as_string(ids), buckets)


def _batch(index, replica: int, batch_size: int, p: dict):
    vocab = p["first_vocab"] + index * p["new_ids_per_batch"]
    seed = tf.stack([index, tf.constant(replica, tf.int64)])
    users = _zipf_ids(seed, batch_size, vocab)
    items = _zipf_ids(seed + 1_000_003, batch_size, vocab) + 10_000_000  # items and users never share an id
    # The hidden truth: some users click more than others, some items draw more clicks, and a user likes
    # items of its kind (one of 4) a little more.
    eagerness = tf.cast(_kind(users + 3, 3), tf.float64) - 1.0
    appeal = tf.cast(_kind(items + 5, 3), tf.float64) - 1.0
    likes = tf.cast(tf.equal(_kind(users, 4), _kind(items + 7, 4)), tf.float64)
    logit = 1.5 * eagerness + 1.5 * appeal + likes - 1.0
    noise = tf.random.stateless_uniform([batch_size], seed=seed + 7, dtype=tf.float64)
    clicks = tf.cast(noise < tf.sigmoid(logit), tf.float32)
    return {"user": users, "item": items}, clicks


def indexed_batches(input_context, params=None) -> tf.data.Dataset:
    """(index, features, clicks) of this replica's batches, from the global step its input starts at."""
    p = _params(params)
    replica = input_context.input_pipeline_id
    batch_size = input_context.get_per_replica_batch_size()
    return ps_toolkit.batch_indices(input_context).map(lambda index: (index, *_batch(index, replica, batch_size, p)))


def input_fn(input_context, params=None):
    return indexed_batches(input_context, params).map(lambda index, features, clicks: (features, clicks))


def eval_input_fn(params=None):
    p = _params(params)
    # Replica 1000 draws batches no training replica draws, from the first vocabulary.
    return tf.data.Dataset.range(EVAL_BATCHES).map(lambda index: _batch(index, 1000, 256, p))
