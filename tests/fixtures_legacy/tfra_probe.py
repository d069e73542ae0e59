"""TFRA's graph-mode behaviour, probed in one process through run_legacy.py; prints one JSON line per check.

    python scripts/run_legacy.py tests/fixtures_legacy/tfra_probe.py CHECK [CHECK...]

Each check builds its own graph and local session, the way TFRA's own kernel
tests do, and prints ``{"check": CHECK, ...}`` with what it measured; the test
(tests/test_tfra_compat.py) compares the numbers with numpy.
"""

import json
import sys

import numpy as np
import tensorflow as tf
import tensorflow_recommenders_addons as tfra

de = tfra.dynamic_embedding
CHECKS = {}


def check(function):
    CHECKS[function.__name__] = function
    return function


def error_of(function):
    """(exception class names along its MRO, message) of what ``function()`` raises; None if nothing."""
    try:
        function()
    except Exception as err:  # the test checks the type TFRA raised
        return [cls.__name__ for cls in type(err).__mro__], str(err)
    return None


@check
def defaults_and_errors():
    var = de.get_variable("t1")
    out = {"key_dtype": var.key_dtype.name, "value_dtype": var.value_dtype.name, "dim": var.dim}
    out["same_name"] = error_of(lambda: de.get_variable("t1"))
    with tf.variable_scope("scope", reuse=tf.AUTO_REUSE):
        first = de.get_variable("shared", dim=2)
        second = de.get_variable("shared", dim=2)
    out["reused"] = first is second
    out["bad_dtypes"] = error_of(lambda: de.get_variable("t2", key_dtype=tf.float32, value_dtype=tf.float32))
    out["ids_dtype"] = error_of(lambda: de.embedding_lookup(var, tf.constant([1, 2], tf.int32)))
    out["python_ints"] = de.embedding_lookup(var, [1, 2]).shape.as_list()  # TF's own lookups take Python ints
    out["float_ids"] = error_of(lambda: de.embedding_lookup(var, [1.5, 2.0]))
    out["two_params"] = error_of(lambda: de.embedding_lookup([var, var], tf.constant([1], tf.int64)))
    out["not_a_variable"] = error_of(lambda: de.embedding_lookup(tf.zeros([3, 2]), tf.constant([1], tf.int64)))
    sparse = tf.sparse.from_dense(tf.constant([[1, 2]], tf.int64))
    out["bad_combiner"] = error_of(lambda: de.embedding_lookup_sparse(var, sparse, None, combiner="max"))
    out["dense_sp_ids"] = error_of(lambda: de.embedding_lookup_sparse(var, tf.constant([[1]], tf.int64), None))
    out["policy_not_class"] = error_of(lambda: de.get_variable("t3", restrict_policy=object))
    out["kv_creator_gpu"] = error_of(lambda: de.HkvHashTableCreator)
    return out


@check
def lookups():
    devices = ["/CPU:0", "/CPU:0"]
    var = de.get_variable("emb", dim=3, devices=devices, initializer=-1.0)
    ids = tf.constant([[1, 2, 3], [3, 2, 1]], tf.int64)
    dense = de.embedding_lookup(var, ids)
    unique = de.embedding_lookup_unique(var, ids)
    sp_ids = tf.SparseTensor([[0, 0], [0, 1], [1, 0], [2, 0]], tf.constant([1, 3, 2, 1], tf.int64), [3, 2])
    sp_weights = tf.SparseTensor(sp_ids.indices, [2.0, 0.5, 1.0, 3.0], sp_ids.dense_shape)
    combined = {
        combiner: de.embedding_lookup_sparse(var, sp_ids, sp_weights, combiner=combiner)
        for combiner in ("sum", "mean", "sqrtn")
    }
    # Row 1 has no id: zeros (no default_id) or the default id's row.
    holes = tf.SparseTensor([[0, 0], [2, 1]], tf.constant([5, 6], tf.int64), [3, 2])
    safe = de.safe_embedding_lookup_sparse(var, holes, None, combiner="sum")
    safe_default = de.safe_embedding_lookup_sparse(var, holes, None, combiner="mean", default_id=7)
    clipped = de.embedding_lookup(var, tf.constant([9], tf.int64), max_norm=1.0)
    with tf.Session() as session:
        session.run(tf.global_variables_initializer())
        values = session.run(
            {
                "dense": dense,
                "unique": unique,
                "combined": combined,
                "safe": safe,
                "safe_default": safe_default,
                "clipped": clipped,
                "size": var.size(),
            }
        )
    values["dense_static_shape"] = dense.shape.as_list()
    return values


def train_once(optimizer_name, make_optimizer):
    """Five steps on ids [1, 2, 2] of a 2-shard table and, beside it, of a dense variable with the same rows."""
    with tf.Graph().as_default():
        var = de.get_variable(f"w_{optimizer_name}", dim=2, initializer=0.5, devices=["/CPU:0", "/CPU:0"])
        dense = tf.get_variable("dense", initializer=tf.fill([3, 2], 0.5))
        ids = tf.constant([1, 2, 2], tf.int64)
        rows, trainable = de.embedding_lookup(var, ids, return_trainable=True, name="rows")
        dense_rows = tf.nn.embedding_lookup(dense, ids)
        loss = tf.reduce_sum(tf.square(rows - 2.0) * [[1.0, 2.0]])
        dense_loss = tf.reduce_sum(tf.square(dense_rows - 2.0) * [[1.0, 2.0]])
        global_step = tf.train.get_or_create_global_step()
        original = make_optimizer()
        optimizer = de.DynamicEmbeddingOptimizer(original)
        train_op = optimizer.minimize(loss, global_step=global_step, var_list=[trainable])
        dense_op = make_optimizer().minimize(dense_loss, var_list=[dense])
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            before = session.run(var.size())
            first = session.run(loss)
            for _ in range(5):
                # The dense step first: AdagradDA reads the global step, which only train_op increments.
                session.run(dense_op)
                session.run(train_op)
            after = session.run([var.size(), var.size(0) + var.size(1)])
            table_rows, dense_values = session.run([de.embedding_lookup(var, tf.constant([1, 2], tf.int64)), dense])
            untouched = session.run(de.embedding_lookup(var, tf.constant([7], tf.int64)))
            last, step = session.run([loss, global_step])
    return {
        "size_before": int(before),
        "sizes_after": [int(value) for value in after],
        "first_loss": float(first),
        "last_loss": float(last),
        "table_rows": table_rows.tolist(),
        "dense_rows": dense_values[1:].tolist(),
        "untouched_row": untouched.tolist(),
        "global_step": int(step),
        "trainable_params_is_var": trainable.params is var,
        "returns_the_same_optimizer": optimizer is original,
        "still_its_class": isinstance(optimizer, type(make_optimizer())),
    }


@check
def optimizers():
    makers = {
        "sgd": lambda: tf.train.GradientDescentOptimizer(0.1),
        "momentum": lambda: tf.train.MomentumOptimizer(0.05, 0.9),
        "adagrad": lambda: tf.train.AdagradOptimizer(0.3),
        "adam": lambda: tf.train.AdamOptimizer(0.1),
        "ftrl": lambda: tf.train.FtrlOptimizer(0.3),
        "rmsprop": lambda: tf.train.RMSPropOptimizer(0.05),
        "adadelta": lambda: tf.train.AdadeltaOptimizer(1.0, rho=0.9, epsilon=1e-3),
        "adagrad_da": lambda: tf.train.AdagradDAOptimizer(
            0.3, tf.train.get_or_create_global_step(), l1_regularization_strength=0.05, l2_regularization_strength=0.1
        ),
        "proximal_adagrad": lambda: tf.train.ProximalAdagradOptimizer(
            0.3, l1_regularization_strength=0.05, l2_regularization_strength=0.1
        ),
        "proximal_sgd": lambda: tf.train.ProximalGradientDescentOptimizer(
            0.05, l1_regularization_strength=0.5, l2_regularization_strength=0.1
        ),
    }
    out = {name: train_once(name, make) for name, make in makers.items()}

    out["unknown"] = error_of(lambda: de.DynamicEmbeddingOptimizer(tf.train.Optimizer(False, "HomeMade")))
    return out


def restrict_after(policy, trained_ids, num_reserved, trigger):
    with tf.Graph().as_default():
        var = de.get_variable("r", dim=2, initializer=0.0, restrict_policy=policy)
        ids = tf.placeholder(tf.int64, [None])
        rows = de.embedding_lookup(var, ids)
        optimizer = de.DynamicEmbeddingOptimizer(tf.train.AdagradOptimizer(0.1))
        train_op = optimizer.minimize(tf.reduce_sum(rows), global_step=tf.train.get_or_create_global_step())
        restrict = var.restrict(num_reserved, trigger=trigger)
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            for batch in trained_ids:
                session.run(train_op, {ids: batch})
            before = session.run(var.size())
            session.run(restrict)
            after = session.run(var.size())
            keys, _ = session.run(var.export())
    return {"before": int(before), "after": int(after), "kept": sorted(int(key) for key in keys)}


@check
def restrict():
    # Ids 0-5 in step 1, 4-8 in step 2 then 3: the oldest are 0-3; 4-8 were seen twice, the rest once.
    batches = [list(range(6)), list(range(4, 9)), list(range(4, 9))]
    return {
        "timestamp": restrict_after(de.TimestampRestrictPolicy, batches, 5, 5),
        "timestamp_under_trigger": restrict_after(de.TimestampRestrictPolicy, batches, 5, 100),
        "frequency": restrict_after(de.FrequencyRestrictPolicy, batches, 5, 5),
        "no_policy_gives_none": de.get_variable("plain").restrict(5) is None,
    }


@check
def inference_mode():
    """A row trained in train mode, then read in inference mode with an id never seen: nothing is inserted."""
    var = de.get_variable("inf", dim=2, initializer=tf.keras.initializers.Zeros())
    rows = de.embedding_lookup(var, tf.constant([1, 2], tf.int64))
    optimizer = de.DynamicEmbeddingOptimizer(tf.train.GradientDescentOptimizer(1.0))
    train_op = optimizer.minimize(tf.reduce_sum(rows), global_step=tf.train.get_or_create_global_step())
    de.enable_inference_mode()
    read, trainable = de.embedding_lookup(var, tf.constant([1, 3], tf.int64), return_trainable=True, name="serve")
    mode = de.get_model_mode()
    de.enable_train_mode()
    with tf.Session() as session:
        session.run(tf.global_variables_initializer())
        session.run(train_op)
        values = session.run(read)
        size = session.run(var.size())
    return {"mode": mode, "wrapper_mode": trainable.model_mode, "size": int(size), "rows": values.tolist()}


@check
def keys_and_trainable():
    """int32 keys, a table left out of training, sync replicas around the tables (string ids refused)."""
    ints = de.get_variable("i32", key_dtype=tf.int32, dim=2, initializer=1.0)
    frozen = de.get_variable("frozen", dim=2, initializer=1.0, trainable=False)
    loss = tf.reduce_sum(de.embedding_lookup(ints, tf.constant([1, 2], tf.int32)))
    loss += tf.reduce_sum(de.embedding_lookup(frozen, tf.constant([1, 2], tf.int64)))
    step = tf.train.get_or_create_global_step()
    train_op = de.DynamicEmbeddingOptimizer(tf.train.GradientDescentOptimizer(1.0)).minimize(loss, global_step=step)
    sync = tf.train.SyncReplicasOptimizer(
        de.DynamicEmbeddingOptimizer(tf.train.AdagradOptimizer(0.1)), replicas_to_aggregate=1
    )
    sync_built = error_of(lambda: sync.minimize(loss, global_step=step))  # int32 ids are aggregated as int64
    inside = error_of(  # the other order: SyncReplicasOptimizer has no formula of its own for the rows
        lambda: de.DynamicEmbeddingOptimizer(tf.train.SyncReplicasOptimizer(tf.train.AdamOptimizer(), 1))
    )
    with tf.Graph().as_default():
        strings = de.get_variable("s", key_dtype=tf.string, dim=2, initializer=1.0)
        string_loss = tf.reduce_sum(de.embedding_lookup(strings, tf.constant(["a"])))
        string_sync = tf.train.SyncReplicasOptimizer(
            de.DynamicEmbeddingOptimizer(tf.train.GradientDescentOptimizer(1.0)), replicas_to_aggregate=1
        )
        refused = error_of(lambda: string_sync.minimize(string_loss, global_step=tf.train.get_or_create_global_step()))
    with tf.Session() as session:
        session.run(tf.global_variables_initializer())
        session.run(train_op)
        keys, values = session.run(ints.export())
        frozen_size = session.run(frozen.size())
    return {
        "int_keys": sorted(int(key) for key in keys),
        "int_keys_dtype": keys.dtype.name,
        "int_rows": values.tolist(),
        "frozen_size": int(frozen_size),
        "sync_replicas": {"int_keys": sync_built, "string_keys": refused, "inside": inside},
    }


if __name__ == "__main__":
    for name in sys.argv[1:]:
        with tf.Graph().as_default():
            out = CHECKS[name]()
        print(json.dumps({"check": name, **out}, default=lambda value: np.asarray(value).tolist()), flush=True)
