"""Dynamic tables in one process: rows, shards, every optimizer against TensorFlow's, admission, eviction, checkpoints.

Graphs run in a plain tf.compat.v1.Session; several shards share the CPU
(each shard is its own set of hash tables, named by its index).
"""

import numpy as np
import pytest
import tensorflow as tf

from ps_toolkit import dynamic_embedding as de
from ps_toolkit.base.errors import ConfigError
from ps_toolkit.dynamic_embedding import keys

CPU = "/cpu:0"
TF1 = tf.compat.v1.train


def _session(graph):
    return tf.compat.v1.Session(graph=graph)


def _rows_of(ids, dim=4, shards=2, key_dtype=tf.int64, **table_args):
    with tf.Graph().as_default() as graph:
        table = de.get_table("t", dim, key_dtype=key_dtype, devices=[CPU] * shards, **table_args)
        rows = de.lookup(table, tf.constant(ids, key_dtype))
        with _session(graph) as session:
            return session.run(rows)


def test_an_id_reads_the_same_initial_row_in_every_graph_and_any_number_of_shards():
    first = _rows_of([[7, 8], [7, -3]], shards=1)
    again = _rows_of([[-3, 7]], shards=3)
    assert first.shape == (2, 2, 4)
    np.testing.assert_array_equal(first[0, 0], first[1, 0])  # the same id twice in a batch
    np.testing.assert_array_equal(again[0, 1], first[0, 0])
    np.testing.assert_array_equal(again[0, 0], first[1, 1])
    assert not np.allclose(first[0, 0], first[0, 1])
    assert 0.01 < np.std(_rows_of(list(range(2000)), dim=8)) < 0.1  # normal, stddev 0.05


def test_string_ids_and_the_initializers():
    words = _rows_of(["a", "b", "a", ""], key_dtype=tf.string, initializer=de.InitialRows("uniform", 0.5, seed=3))
    np.testing.assert_array_equal(words[0], words[2])
    assert np.all(np.abs(words) <= 0.5)
    zeros = _rows_of([1, 2], initializer=de.InitialRows("constant", 0.0))
    np.testing.assert_array_equal(zeros, np.zeros((2, 4)))


def test_shards_split_the_ids_and_each_reads_only_its_unique_ids_on_its_device():
    shards = keys.shard_of(tf.constant(np.arange(1000), tf.int64), 3).numpy()
    counts = np.bincount(shards, minlength=3)
    assert counts.min() > 250, counts
    with tf.Graph().as_default():
        table = de.get_table("t", 2, devices=["/job:ps/task:0", "/job:ps/task:1"])
        de.lookup(table, tf.constant([1, 1, 2], tf.int64))
        ops = tf.compat.v1.get_default_graph().get_operations()
        finds = [op for op in ops if op.type == "LookupTableFindV2"]
        assert {op.device for op in finds} == {"/job:ps/task:0", "/job:ps/task:1"}
        # Each shard's lookup takes its part of the unique ids (as stored keys [tag, hash]), never the batch.
        for op in finds:
            stored = op.inputs[1].op
            assert stored.type == "Pack", stored.type
            hashes = stored.inputs[1].op.inputs[0].op  # the bitcast hash of the shard's ids
            assert hashes.type == "DynamicPartition", hashes.type


def _dense_twin(optimizer_fn, initial, grads_scale, steps):
    """TensorFlow's own optimizer on a one-row variable, with the gradient the table gets."""
    with tf.Graph().as_default() as graph:
        step = tf.compat.v1.train.get_or_create_global_step()
        var = tf.compat.v1.get_variable("v", initializer=initial[None, :])
        rows = tf.gather(var, [0, 0])
        loss = tf.reduce_sum(rows * grads_scale)
        train = optimizer_fn().minimize(loss, global_step=step)
        with _session(graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            for _ in range(steps):
                session.run(train)
            return session.run(var)[0]


OPTIMIZERS = {
    "sgd": lambda: TF1.GradientDescentOptimizer(0.1),
    "momentum": lambda: TF1.MomentumOptimizer(0.1, momentum=0.9),
    "nesterov": lambda: TF1.MomentumOptimizer(0.1, momentum=0.9, use_nesterov=True),
    "adagrad": lambda: TF1.AdagradOptimizer(0.1),
    "adam": lambda: TF1.AdamOptimizer(0.01),
    "ftrl": lambda: TF1.FtrlOptimizer(0.1, l1_regularization_strength=0.001, l2_regularization_strength=0.01),
    "rmsprop": lambda: TF1.RMSPropOptimizer(0.01, momentum=0.5),
    "rmsprop_centered": lambda: TF1.RMSPropOptimizer(0.01, centered=True),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_each_optimizer_updates_a_row_as_tensorflow_updates_a_variable(name):
    scale = np.array([0.5, -1.0, 2.0, 0.25], np.float32)
    with tf.Graph().as_default() as graph:
        step = tf.compat.v1.train.get_or_create_global_step()
        table = de.get_table("t", 4, devices=[CPU, CPU])
        initial = table.initial_rows(tf.constant([42], tf.int64))[0]
        rows = de.lookup(table, tf.constant([42, 42], tf.int64))
        loss = tf.reduce_sum(rows * scale)
        train = de.TableOptimizer(OPTIMIZERS[name]()).minimize(loss, global_step=step)
        after = de.lookup(table, tf.constant([42], tf.int64))[0]
        with _session(graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            start = session.run(initial)
            for _ in range(3):
                session.run(train)
            trained = session.run(after)
    expected = _dense_twin(OPTIMIZERS[name], start, scale, steps=3)
    assert not np.allclose(trained, start)
    np.testing.assert_allclose(trained, expected, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("combiner", de.COMBINERS)
def test_lookup_sparse_combines_as_embedding_lookup_sparse(combiner):
    with tf.Graph().as_default() as graph:
        sp_ids = tf.SparseTensor([[0, 0], [0, 1], [2, 0]], tf.constant([5, 9, 5], tf.int64), [3, 2])
        sp_weights = tf.SparseTensor([[0, 0], [0, 1], [2, 0]], [1.0, 3.0, 2.0], [3, 2])
        table = de.get_table("t", 3, devices=[CPU, CPU])
        ours = de.lookup_sparse(table, sp_ids, sp_weights, combiner=combiner)
        rows = table.initial_rows(tf.constant([0, 5, 9], tf.int64))  # a dense twin: row i holds id [0, 5, 9][i]
        twin_ids = tf.SparseTensor(sp_ids.indices, tf.constant([1, 2, 1], tf.int64), sp_ids.dense_shape)
        theirs = tf.nn.embedding_lookup_sparse(rows, twin_ids, sp_weights, combiner=combiner)
        with _session(graph) as session:
            ours, theirs = session.run([ours, theirs])
    np.testing.assert_allclose(ours[[0, 2]], theirs[[0, 2]], rtol=1e-6)
    np.testing.assert_array_equal(ours[1], np.zeros(3))  # a batch row without ids


def _trainer(table_args, shards=2):
    """(graph, session, train(ids), table); the loss pulls every row towards zero."""
    graph = tf.Graph()
    with graph.as_default():
        step = tf.compat.v1.train.get_or_create_global_step()
        table = de.get_table("t", 2, devices=[CPU] * shards, **table_args)
        ids = tf.compat.v1.placeholder(tf.int64, [None])
        loss = tf.reduce_sum(tf.square(de.lookup(table, ids)))
        train = de.TableOptimizer(TF1.AdagradOptimizer(0.1)).minimize(loss, global_step=step)
        init = tf.compat.v1.global_variables_initializer()
    session = _session(graph)
    session.run(init)
    return graph, session, lambda batch: session.run(train, {ids: batch}), table


def test_an_id_gets_a_row_once_seen_admit_after_times():
    graph, session, train, table = _trainer({"admit_after": 3})
    with graph.as_default():
        size, admitted = table.size(), table.stat(0)
        row = de.lookup(table, tf.constant([5], tf.int64))
    initial = session.run(row)
    train([5, 5])  # seen twice: counting, no row, not trained
    assert session.run(size) == 0
    np.testing.assert_array_equal(session.run(row), initial)
    train([5, 6])  # third time: admitted and trained
    assert session.run([size, admitted]) == [1, 1]
    assert not np.allclose(session.run(row), initial)


def test_eviction_by_age_and_by_rows_per_shard():
    graph, session, train, table = _trainer({"evict_after_steps": 2, "max_rows_per_shard": 3}, shards=1)
    with graph.as_default():
        evict = de.eviction.eviction_op(table, tf.compat.v1.train.get_global_step())
        size, evicted = table.size(), table.stat(1)
    train([1, 2])  # step 0
    train([3, 4, 5])  # step 1
    train([6])  # step 2
    session.run(evict)  # at step 3: 1 and 2 (step 0) are stale; of the 4 left, one of step 1 goes (limit 3)
    assert session.run([size, evicted]) == [3, 3]
    with graph.as_default():
        ids, _ = de.table_ops.export(table)
        meta_ids, _ = de.table_ops.export_component(table, "meta")
    left = set(session.run(ids))
    assert 6 in left and len(left & {3, 4, 5}) == 2, left
    assert set(session.run(meta_ids)) == left


def _save(tmp_path, shards, dim=2):
    graph, session, train, table = _trainer({}, shards=shards)
    with graph.as_default():
        train([1, 2, 3, 400, 5000])
        rows = de.lookup(table, tf.constant([1, 2, 3, 400, 5000], tf.int64))
        accumulators = [de.table_ops.export_component(table, "slot_accumulator")]
        saver = tf.compat.v1.train.Saver(sharded=True)
        path = saver.save(session, str(tmp_path / "model"))
    return path, session.run(rows), sorted(np.concatenate([session.run(a)[1][:, 0] for a in accumulators]))


@pytest.mark.parametrize("restore_shards", [1, 3])
def test_a_checkpoint_restores_into_another_number_of_shards(tmp_path, restore_shards):
    path, rows, accumulators = _save(tmp_path, shards=2)
    graph, session, _, table = _trainer({}, shards=restore_shards)
    with graph.as_default():
        restored = de.lookup(table, tf.constant([1, 2, 3, 400, 5000], tf.int64))
        exports = [de.table_ops.export_component(table, "slot_accumulator")]
        size = table.size()
        tf.compat.v1.train.Saver(sharded=True).restore(session, path)
    np.testing.assert_array_equal(session.run(restored), rows)
    assert sorted(np.concatenate([session.run(e)[1][:, 0] for e in exports])) == accumulators
    assert session.run(size) == 5


def test_a_model_with_tables_is_ready_only_once_the_chief_initialized_or_restored_them(tmp_path):
    """A fresh session has fresh resources, as a restarted ps: its tables are empty until the restore."""
    graph, session, train, table = _trainer({}, shards=2)
    with graph.as_default():
        size = table.size()
        de.require_filled_tables()  # what the toolkit's own scaffold asks for
        scaffold = tf.compat.v1.train.Scaffold(saver=tf.compat.v1.train.Saver(sharded=True)).finalize()
    parts = ("rows", "meta", "slot_accumulator")
    markers = sorted(f"{shard.prefix}/{part}/filled:0" for shard in table.shards for part in parts)

    def not_ready(a_session, op):
        return sorted(name.decode() for name in a_session.run(op))

    with session:
        assert not_ready(session, scaffold.ready_op) == markers  # made, but neither initialized nor restored
        session.run(scaffold.init_op)  # the chief's init of a fresh model
        assert not_ready(session, scaffold.ready_op) == []
        train([1, 2, 3])
        path = scaffold.saver.save(session, str(tmp_path / "model"))
    with _session(graph) as restarted:
        # What a worker, and the chief's check for live state, ask before their local init: the empty shards.
        assert not_ready(restarted, scaffold.ready_for_local_init_op) == sorted(["global_step", *markers])
        scaffold.saver.restore(restarted, path)
        assert not_ready(restarted, scaffold.ready_op) == []
        assert restarted.run(size) == 3


def test_a_users_own_scaffold_with_only_the_variables_initializer_is_ready_and_trains_as_before(tmp_path):
    """A TF1 script's Scaffold(init_op=global_variables_initializer()) on a model with tables (no toolkit scaffold)."""
    graph, _, _, table = _trainer({}, shards=2)
    with graph.as_default():
        ids = tf.constant([4, 5], tf.int64)
        loss = tf.reduce_sum(tf.square(de.lookup(table, ids)))
        train = de.TableOptimizer(TF1.AdagradOptimizer(0.1)).minimize(loss)
        size = table.size()
        scaffold = tf.compat.v1.train.Scaffold(init_op=tf.compat.v1.global_variables_initializer())
        creator = tf.compat.v1.train.ChiefSessionCreator(scaffold=scaffold)
        with tf.compat.v1.train.MonitoredSession(session_creator=creator) as session:
            assert list(session.run(scaffold.ready_op)) == []
            session.run(train)
            assert session.run(size) == 2


def test_a_dim_mismatch_on_restore_names_the_table(tmp_path):
    path, _, _ = _save(tmp_path, shards=2)
    with tf.Graph().as_default() as graph:
        de.get_table("t", 3)
        saver = tf.compat.v1.train.Saver(sharded=True)
        with (
            _session(graph) as session,
            pytest.raises(
                tf.errors.InvalidArgumentError,
                match="dynamic table t rows: the checkpoint holds values of another shape",
            ),
        ):
            saver.restore(session, path)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"key_dtype": tf.int32}, "dynamic table 't': key dtype tf.int32 is not taken; valid: int64, string"),
        ({"key_dtype": "float32"}, "key dtype 'float32' is not taken"),
        ({"admit_after": 0}, "admit_after=0 must be an integer >= 1 (an admission threshold below 1 admits nothing)"),
        ({"dim": 0}, "dim=0 must be an integer >= 1"),
        ({"value_dtype": tf.int64}, "value dtype int64 is not a float dtype"),
        ({"initializer": "zeros"}, "initializer 'zeros' is not an InitialRows"),
    ],
)
def test_bad_table_arguments_are_one_line_errors(args, message):
    with tf.Graph().as_default(), pytest.raises(ConfigError) as error:
        de.get_table("t", **{"dim": 2, **args})
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_table_name_used_twice_is_refused_unless_reused():
    with tf.Graph().as_default():
        with tf.compat.v1.variable_scope("model"):
            table = de.get_table("user", 4)
            with pytest.raises(ConfigError, match="dynamic table name 'model/user' is used twice"):
                de.get_table("user", 4)
        with tf.compat.v1.variable_scope("model", reuse=True):
            assert de.get_table("user", 4) is table
            with pytest.raises(ConfigError, match="reused with dim=8"):
                de.get_table("user", 8)


def test_python_ints_are_ids_of_an_int64_table_as_tf_lookups_take_them():
    with tf.Graph().as_default() as graph:
        table = de.get_table("t", 3, devices=[CPU] * 2)
        from_list, from_tensor = de.lookup(table, [1, 2]), de.lookup(table, tf.constant([1, 2], tf.int64))
        nested = de.lookup(table, [[1], [2]])
        with _session(graph) as session:
            got, want, rows = session.run([from_list, from_tensor, nested])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(rows[:, 0], want)


def test_ids_of_another_dtype_and_unknown_combiners_are_refused():
    with tf.Graph().as_default():
        table = de.get_table("t", 2)
        with pytest.raises(ConfigError, match="has int64 keys; got string ids"):
            de.lookup(table, tf.constant(["a"]))
        with pytest.raises(ConfigError, match="has int64 keys; got float32 ids"):
            de.lookup(table, [1.5, 2.0])
        sp_ids = tf.SparseTensor([[0, 0]], tf.constant([1], tf.int64), [1, 1])
        with pytest.raises(ConfigError, match="combiner 'max' is not one of sum, mean, sqrtn"):
            de.lookup_sparse(table, sp_ids, combiner="max")
        with pytest.raises(ConfigError, match="cannot be trained by OwnOptimizer"):
            loss = tf.reduce_sum(de.lookup(table, tf.constant([1], tf.int64)))
            de.TableOptimizer(type("OwnOptimizer", (TF1.Optimizer,), {})(False, "own")).minimize(loss)


def test_the_chiefs_checkpoint_check_names_a_dim_mismatch_in_one_line(tmp_path):
    from ps_toolkit.task import checkpoints

    _save(tmp_path, shards=2)
    with tf.Graph().as_default():
        tf.compat.v1.train.get_or_create_global_step()
        same = de.get_table("t", 2, devices=[CPU] * 3)
        assert checkpoints.check_model_matches_checkpoint(str(tmp_path), tf.compat.v1.global_variables(), [same]) == 1
    with tf.Graph().as_default():
        tf.compat.v1.train.get_or_create_global_step()
        table = de.get_table("t", 5)
        with pytest.raises(ConfigError) as error:
            checkpoints.check_model_matches_checkpoint(str(tmp_path), tf.compat.v1.global_variables(), [table])
    assert "dynamic table t has rows of dim 5; the checkpoint's rows have [2]" in str(error.value)


def test_maintenance_evicts_and_measures_in_one_run_and_the_end_does_not_repeat_the_last_steps():
    graph, session, train, table = _trainer({"evict_after_steps": 1}, shards=2)
    with graph.as_default():
        hook = de.TableMaintenanceHook([table], every_steps=2)
        hook.begin()
    hook.after_create_session(session, None)  # step 0: the tables as the session found them
    train([1, 2])
    train([3])
    context = tf.compat.v1.train.SessionRunContext(None, session)
    hook.after_run(context, tf.compat.v1.train.SessionRunValues(2, None, None))  # step 2: due
    runs = session.run
    counted = []
    session.run = lambda fetches, *a, **k: (counted.append(fetches), runs(fetches, *a, **k))[1]
    hook.end(session)  # still at step 2: its maintenance already ran
    assert hook.runs == 2 and len(counted) == 1, counted  # the end read the global step only
    record = hook.result()["t"]
    assert [h["global_step"] for h in record["history"]] == [0, 2]
    assert (record["rows_before_eviction"], record["rows"], record["evicted"]) == (3, 1, 2)
    train([4])
    hook.end(session)  # step 3: one more run
    assert hook.runs == 3 and hook.result()["t"]["global_step"] == 3


def test_a_save_exports_each_hash_table_once_for_all_tables_and_splits_it_in_one_copy():
    graph, _, _, _ = _trainer({}, shards=2)  # Adagrad: rows, meta and an accumulator slot per shard
    with graph.as_default():
        for name in ("u", "v", "w"):  # more tables of the same group: no more exports
            de.get_table(name, 2, devices=["/job:ps/task:0", "/job:ps/task:1"])
        before = set(graph.get_operations())
        tf.compat.v1.train.Saver(sharded=True)
    new_ops = set(graph.get_operations()) - before
    exports = [op for op in new_ops if op.type == "LookupTableExportV2" and "/save_dynamic_tables" in op.name]
    with graph.as_default():
        hash_tables = [t for g in de.layout.groups_of_graph() for shard in g.shards for t in shard.components()]
    assert len(exports) == len(hash_tables) <= 10, [op.name for op in exports]  # 2 groups, never per table
    for export in exports:
        # The dense table exports its own arrays (no copy); one partition copies the entries, for every table.
        shape_checks = export.outputs[1].consumers()
        assert {op.type for op in shape_checks} == {"EnsureShape"}, export.name
        readers = [reader for check in shape_checks for reader in check.outputs[0].consumers()]
        assert {op.type for op in readers} == {"DynamicPartition"}, (export.name, readers)


@pytest.mark.parametrize("with_dense_variable", [True, False])
def test_adam_counts_its_steps_without_a_global_step_as_tensorflow_does(with_dense_variable):
    """minimize() with no global_step: the table's Adam step count is the optimizer's beta powers, not the step."""
    with tf.Graph().as_default():
        tf.compat.v1.train.get_or_create_global_step()  # present, never incremented by this training op
        table = de.get_table("t", 2, initializer=de.InitialRows("constant", 0.1))
        row = de.lookup(table, tf.constant([1], tf.int64))
        twin = tf.compat.v1.get_variable("twin", [1, 2], initializer=tf.compat.v1.constant_initializer(0.1))
        gradient = tf.constant([[0.5, -1.5]])
        loss = tf.reduce_sum(row * gradient) + (tf.reduce_sum(twin * gradient) if with_dense_variable else 0.0)
        train = de.TableOptimizer(tf.compat.v1.train.AdamOptimizer(0.05)).minimize(loss)
        reference = tf.compat.v1.get_variable("reference", [1, 2], initializer=tf.compat.v1.constant_initializer(0.1))
        reference_train = tf.compat.v1.train.AdamOptimizer(0.05).minimize(tf.reduce_sum(reference * gradient))
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            for _ in range(10):
                session.run([train, reference_train])
            np.testing.assert_allclose(session.run(row), session.run(reference), rtol=1e-5)
            if with_dense_variable:
                np.testing.assert_allclose(session.run(twin), session.run(reference), rtol=1e-5)
