"""A wide-and-deep click model for ps_toolkit: embedding tables over the ps tasks, crosses, AUC.

Train it on a local cluster of 2 ps and 2 workers (from the repository root):

    PYTHONPATH=examples/wide_deep python scripts/launch_local.py --num_ps=2 --num_workers=2 \\
        --model_fn=clicks_wide_deep:model_fn --input_fn=clicks_wide_deep:input_fn \\
        --eval_input_fn=clicks_wide_deep:eval_input_fn --optimizer=adagrad --train_steps=1000 \\
        --export_dir=/tmp/clicks

Data: the sharded CSV files of ``params["data_dir"]`` (default: ``data/`` beside
this file, made by make_clicks_data.py). Each worker reads its own shards
(``input_context``), shuffled; the eval file is read once, in order.

Deep part: embeddings of user, ad and site (hashed ids, tables split over the
ps tasks by a partitioner) with the hour and price into two ReLU layers.
Wide part: one weight per (user, ad), (site, hour) and (ad, hour) cross,
hashed into one large table: a step looks up and updates only its rows.
"""

import os

import tensorflow as tf

import ps_toolkit

DEFAULT_DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
COLUMNS = ["clicked", "user_id", "ad_id", "site_id", "hour", "price"]
DEFAULTS = [[0], [0], [0], [0], [0], [0.0]]
CROSSES = (("user_id", "ad_id"), ("site_id", "hour"), ("ad_id", "hour"))


def _parse(lines):
    values = tf.io.decode_csv(lines, DEFAULTS)
    row = dict(zip(COLUMNS, values, strict=True))
    labels = tf.cast(row.pop("clicked"), tf.int64)
    return {name: tf.cast(value, tf.int64) if name != "price" else value for name, value in row.items()}, labels


def _files(params, pattern: str) -> list:
    data_dir = (params or {}).get("data_dir", DEFAULT_DATA_DIR)
    files = sorted(tf.io.gfile.glob(os.path.join(data_dir, pattern)))
    if not files:
        raise ValueError(f"no {pattern} files in {data_dir} (make them with examples/wide_deep/make_clicks_data.py)")
    return files


def input_fn(input_context, params=None):
    """This replica's shards of the training files, shuffled and repeated, in batches."""
    files = _files(params, "train-*.csv")
    if len(files) < input_context.num_input_pipelines:
        raise ValueError(f"{len(files)} training shards for {input_context.num_input_pipelines} workers")
    return (
        tf.data.Dataset.from_tensor_slices(files)
        .shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        .interleave(lambda path: tf.data.TextLineDataset(path).skip(1), cycle_length=2)
        .shuffle(4096, seed=input_context.input_pipeline_id)
        .repeat()
        .batch(input_context.get_per_replica_batch_size(), drop_remainder=True)
        .map(_parse)
        .prefetch(2)
    )


def eval_input_fn(params=None):
    return tf.data.TextLineDataset(_files(params, "eval-*.csv")).skip(1).batch(1000).map(_parse)


def _embedding(ids, name: str, buckets: int, dim: int, partitions: int):
    table = tf.compat.v1.get_variable(
        name,
        [buckets, dim],
        initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.05),
        partitioner=tf.compat.v1.fixed_size_partitioner(partitions),
    )
    return tf.nn.embedding_lookup(table, tf.math.floormod(ids, buckets))


def model_fn(features, labels, mode, params):
    buckets, partitions = params.get("hash_buckets", 1 << 20), params.get("partitions", 2)
    deep = [
        _embedding(features["user_id"], "user_embedding", 8192, 16, partitions),
        _embedding(features["ad_id"], "ad_embedding", 1024, 16, partitions),
        _embedding(features["site_id"], "site_embedding", 64, 4, 1),
        tf.one_hot(features["hour"], 24),
        tf.expand_dims(tf.math.log1p(features["price"]), 1),
    ]
    net = tf.concat(deep, axis=1)
    for units in (64, 32):
        net = tf.compat.v1.layers.dense(net, units, activation=tf.nn.relu)
    deep_logit = tf.squeeze(tf.compat.v1.layers.dense(net, 1), axis=1)
    crosses = [features[a] * 1_000_003 + features[b] for a, b in CROSSES]
    wide_ids = tf.stack([tf.math.floormod(c * len(CROSSES) + i, buckets) for i, c in enumerate(crosses)], axis=1)
    wide_weights = _embedding(wide_ids, "wide_weights", buckets, 1, partitions)
    logits = deep_logit + tf.reduce_sum(wide_weights, axis=[1, 2])
    probability = tf.sigmoid(logits)
    predictions = {"probability": probability, "clicked": tf.cast(probability > 0.5, tf.int64)}
    if mode == ps_toolkit.ModeKeys.PREDICT:
        return ps_toolkit.ModelSpec(mode, predictions=predictions)
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.cast(labels, tf.float32), logits=logits))
    metrics = None
    if mode == ps_toolkit.ModeKeys.EVAL:
        metrics = {
            "auc": tf.compat.v1.metrics.auc(labels, probability),
            "accuracy": tf.compat.v1.metrics.accuracy(labels, predictions["clicked"]),
        }
    return ps_toolkit.ModelSpec(mode, loss=loss, predictions=predictions, eval_metric_ops=metrics)
