"""The Criteo-shaped benchmark model for ps_toolkit: 26 embedding tables (or one shared), 13 dense features, an MLP.

A model_fn and input_fns of the ps_toolkit seam, told the variant by ``--params``:
``{"ids": "zipf1.05", "tables": "per_field" | "shared", "vocab": 1000000, "dim": 8}``.
The raw TF1 and TF2 systems build the same arithmetic from ``logits_of`` and
``HIDDEN_UNITS``. Each table is split over the ps by a fixed-size partitioner;
the lookups go through ``ps_toolkit.embedding_lookups`` (unique ids, one
transfer per ps), whose levers the toolkit's flags set. With ``"dynamic": true`` the tables are
ps_toolkit.dynamic_embedding tables instead (the ``ps_toolkit_dynamic`` system).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

import ps_toolkit
from benchmarks import ctr_data
from benchmarks.ctr_data import FIELDS, CtrShape
from ps_toolkit import dynamic_embedding as de

HIDDEN_UNITS = (64, 32)
LEARNING_RATE = 0.05
INIT_STDDEV = 0.05
AUC_THRESHOLDS = 4000


def shape_of(params) -> CtrShape:
    params = dict(params or {})
    return CtrShape(vocab=int(params.get("vocab", CtrShape.vocab)), dim=int(params.get("dim", CtrShape.dim)))


def field_offsets(vocab: int, fields: int = FIELDS) -> np.ndarray:
    """Where each field's ids start in a table the fields share."""
    return np.arange(fields, dtype=np.int64) * vocab


def fields_of(ids) -> int:
    """How many fields a batch of ids [batch, fields] has (FIELDS, or another count for a graph-size model)."""
    return int(ids.shape[1]) if ids.shape.rank == 2 and ids.shape[1] is not None else FIELDS


def logits_of(rows, dense, layer):
    """The arithmetic every system shares: rows [batch, fields, dim] and dense [batch, 13] through the MLP.

    ``layer(inputs, units, name)`` is a fully connected layer (ReLU applied here).
    """
    net = tf.concat([tf.reshape(rows, [-1, rows.shape[1] * rows.shape[-1]]), dense], axis=1)
    for i, units in enumerate(HIDDEN_UNITS):
        net = tf.nn.relu(layer(net, units, f"hidden{i}"))
    return tf.squeeze(layer(net, 1, "logit"), axis=1)


def dense_layer(inputs, units: int, name: str):
    """A fully connected layer from get_variable (the raw TF1 script's too): Glorot weights, zero bias."""
    with tf.compat.v1.variable_scope(name):
        weights = tf.compat.v1.get_variable(
            "kernel", [inputs.shape[-1], units], initializer=tf.compat.v1.glorot_uniform_initializer()
        )
        bias = tf.compat.v1.get_variable("bias", [units], initializer=tf.compat.v1.zeros_initializer())
    return tf.matmul(inputs, weights) + bias


def input_fn(input_context, params):
    shape = shape_of(params)
    batch = input_context.get_per_replica_batch_size()
    shape = CtrShape(vocab=shape.vocab, dim=shape.dim, batch_size=batch)
    return ctr_data.dataset(input_context.input_pipeline_id + 1, params.get("ids", "zipf1.05"), shape)


def eval_input_fn(params):
    return ctr_data.eval_dataset(params.get("ids", "zipf1.05"), shape_of(params))


def dynamic_rows(ids, params):
    """The rows [batch, fields, dim] from ps_toolkit.dynamic_embedding tables (sharded over every ps,
    rows made when an id is first trained, trained by the toolkit's --optimizer)."""
    shape, fields = shape_of(params), fields_of(ids)
    if params.get("tables", "per_field") == "shared":
        initial = de.InitialRows("normal", scale=INIT_STDDEV, seed=0)
        table = de.get_table("embeddings", dim=shape.dim, initializer=initial)
        return de.lookup(table, ids + field_offsets(shape.vocab, fields))
    # A seed per field: the same id in two fields gets two initial rows, as with the fixed tables.
    tables = [
        de.get_table(f"embeddings_{f}", dim=shape.dim, initializer=de.InitialRows("normal", scale=INIT_STDDEV, seed=f))
        for f in range(fields)
    ]
    return tf.stack(
        [de.lookup(table, field) for table, field in zip(tables, tf.unstack(ids, axis=1), strict=True)], axis=1
    )


def model_fn(features, labels, mode, params):
    shape = shape_of(params)
    initializer = tf.compat.v1.truncated_normal_initializer(stddev=INIT_STDDEV)
    partitioner = tf.compat.v1.fixed_size_partitioner(int(params.get("num_shards", 2)))
    ids = features["ids"]
    fields = fields_of(ids)
    if params.get("dynamic"):
        rows = dynamic_rows(ids, params)
    elif params.get("tables", "per_field") == "shared":
        table = tf.compat.v1.get_variable(
            "embeddings", [fields * shape.vocab, shape.dim], initializer=initializer, partitioner=partitioner
        )
        (rows,) = ps_toolkit.embedding_lookups([table], [ids + field_offsets(shape.vocab, fields)])
    else:
        tables = [
            tf.compat.v1.get_variable(
                f"embeddings_{f}", [shape.vocab, shape.dim], initializer=initializer, partitioner=partitioner
            )
            for f in range(fields)
        ]
        rows = tf.stack(ps_toolkit.embedding_lookups(tables, tf.unstack(ids, axis=1)), axis=1)

    logits = logits_of(rows, features["dense"], dense_layer)
    probability = tf.sigmoid(logits)
    if mode == ps_toolkit.ModeKeys.PREDICT:
        return ps_toolkit.ModelSpec(mode, predictions={"probability": probability})
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.cast(labels, tf.float32), logits=logits))
    metrics = None
    if mode == ps_toolkit.ModeKeys.EVAL:
        metrics = {
            "auc": tf.compat.v1.metrics.auc(
                labels, probability, num_thresholds=AUC_THRESHOLDS, summation_method="careful_interpolation"
            ),
            "accuracy": tf.compat.v1.metrics.accuracy(labels, tf.cast(probability > 0.5, tf.int64)),
        }
    return ps_toolkit.ModelSpec(mode, loss=loss, eval_metric_ops=metrics)
