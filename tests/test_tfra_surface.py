"""TFRA's graph-mode surface as TFRA's own tests use it: private module paths, table-level Variable methods, the
restrict policies' status, and the defects a new user met (each test here fails without its fix).

In-process: ``install.install()`` serves ``tensorflow_recommenders_addons``; each test builds its own graph.
"""

import numpy as np
import pytest
import tensorflow as tf

from ps_toolkit import dynamic_embedding as tables
from ps_toolkit.dynamic_embedding import table_ops
from ps_toolkit_compat.tfra import refused


def _ids(values):
    return tf.constant(values, tf.int64)


def test_private_module_paths_serve_the_same_objects(de):
    from tensorflow_recommenders_addons.dynamic_embedding.python.ops import dynamic_embedding_ops as ops_module
    from tensorflow_recommenders_addons.dynamic_embedding.python.ops import restrict_policies
    from tensorflow_recommenders_addons.dynamic_embedding.python.ops.dynamic_embedding_optimizer import (
        DynamicEmbeddingOptimizer,
    )
    from tensorflow_recommenders_addons.dynamic_embedding.python.ops.dynamic_embedding_variable import Variable
    from tensorflow_recommenders_addons.utils.check_platform import is_arm64, is_macos

    assert Variable is de.Variable and DynamicEmbeddingOptimizer is de.DynamicEmbeddingOptimizer
    assert ops_module.embedding_lookup_sparse is de.embedding_lookup_sparse
    assert restrict_policies.TimestampRestrictPolicy is de.TimestampRestrictPolicy
    assert is_macos() is False and is_arm64() in (True, False)
    # A public name TFRA defined there and not served: its own reason, in one line.
    with pytest.raises((refused.NotServedError, refused.NotServedModuleError), match="GPU-only in TFRA"):
        from tensorflow_recommenders_addons.dynamic_embedding.python.ops.dynamic_embedding_creator import (  # noqa: F401
            HkvHashTableCreator,
        )


def test_unlisted_names_point_to_the_tfra_docs(de):
    with pytest.raises(refused.NotServedError) as raised:
        de.no_such_name  # noqa: B018
    assert "docs/tfra.md" in str(raised.value) and "\n" not in str(raised.value)
    with pytest.raises(refused.NotServedModuleError, match="docs/tfra.md"):
        import tensorflow_recommenders_addons.dynamic_embedding.python.ops.hkv_hashtable_ops  # noqa: F401


def test_ragged_lookup_reads_a_ragged_tensor_as_its_sparse_form(de):
    from tensorflow_recommenders_addons.dynamic_embedding.python.ops.ragged_embedding_ops import (
        embedding_lookup_sparse,
    )

    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        var = de.get_variable("ragged", dim=2, initializer=1.0)
        ragged = tf.RaggedTensor.from_row_lengths(_ids([1, 2, 3]), [2, 1])
        combined = embedding_lookup_sparse(var, ragged, None, combiner="sum")
        assert np.allclose(session.run(combined), [[2.0, 2.0], [1.0, 1.0]])


def test_upsert_remove_clear_and_lookup_with_exists(de):
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        var = de.get_variable("t", dim=2, initializer=-1.0, devices=["/CPU:0"] * 3)
        session.run(var.upsert(_ids([[1, 2], [3, 4]]), tf.reshape(tf.range(8, dtype=tf.float32), [2, 2, 2])))
        assert session.run(var.size()) == 4
        rows, exists = session.run(var.lookup(_ids([3, 9]), return_exists=True))
        assert np.allclose(rows, [[4.0, 5.0], [-1.0, -1.0]]) and exists.tolist() == [True, False]
        session.run(var.remove(_ids([1, 9])))
        keys, values = session.run(var.export())
        assert dict(zip(keys.tolist(), values.tolist(), strict=True)) == {2: [2, 3], 3: [4, 5], 4: [6, 7]}
        assert [session.run(table.size()) for table in var.tables] == [session.run(var.size(i)) for i in range(3)]
        assert len(var.tables) == 3 and sum(session.run(table.size()) for table in var.tables) == 3
        session.run(var.clear())
        assert session.run(var.size()) == 0
        assert session.run(var.lookup(_ids([2]))).tolist() == [[-1.0, -1.0]]


def test_accum_adds_deltas_only_where_nothing_changed_meanwhile(de):
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        var = de.get_variable("acc", dim=1, initializer=-1.0)
        session.run(var.upsert(_ids([0, 1, 2, 3]), [[0.0], [1.0], [2.0], [3.0]]))
        _, exists = var.lookup(_ids([0, 1, 100, 3]), return_exists=True)
        exists = session.run(exists)
        session.run(var.upsert(_ids([100]), [[99.0]]))  # another process adds 100 and removes 1 meanwhile
        session.run(var.remove(_ids([1])))
        session.run(
            var.accum(_ids([0, 1, 100, 3]), [[0.0], [1.0], [2.0], [3.0]], [[10.0], [11.0], [100.0], [13.0]], exists)
        )
        keys, values = session.run(var.export())
        assert dict(zip(keys.tolist(), values[:, 0].tolist(), strict=True)) == {0: 10.0, 2: 2.0, 3: 13.0, 100: 99.0}


def test_size_inside_a_finalized_graph(de):
    with tf.Graph().as_default() as graph:
        var = de.get_variable("sized", dim=2, devices=["/CPU:0", "/CPU:0"])
        upsert = var.upsert(_ids([5, 6, 7]), tf.zeros([3, 2]))
        graph.finalize()  # as MonitoredTrainingSession does before the user's loop
        with tf.compat.v1.Session() as session:
            session.run(upsert)
            assert session.run(var.size()) == 3
            assert session.run(var.size(0)) + session.run(var.size(1)) == 3


def test_trainable_wrapper_update_op_and_device(de):
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        var = de.get_variable("wrapped", dim=1, initializer=0.0)
        with tf.device("/CPU:0"):
            ids = _ids([4])
        _, wrapper = de.embedding_lookup(var, ids, return_trainable=True)
        assert "CPU:0" in wrapper.device
        session.run(wrapper.update_op())  # as TFRA: an id with no row gets its initial row
        assert session.run(var.size()) == 1
        assert session.run(var.lookup(ids)).tolist() == [[0.0]]
        session.run(wrapper.update_op(v0=tf.constant([[3.0]])))
        assert session.run(var.lookup(_ids([4]))).tolist() == [[3.0]]


@pytest.mark.parametrize("initializer", ["glorot_uniform", "he_normal"])
def test_glorot_and_he_initializers_build_and_give_rows(de, initializer):
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        var = de.get_variable("init", dim=4, initializer=tf.keras.initializers.get(initializer))
        rows = session.run(de.embedding_lookup(var, _ids([1, 2, 3])))
        assert rows.shape == (3, 4) and np.all(np.isfinite(rows)) and np.any(rows != 0.0)


def _table_only_training(de, loss_of):
    """Rows after one SGD step (rate 1) on sum(rows) of ids [1, 2], with an unrelated trainable variable around."""
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        tf.compat.v1.get_variable("unrelated", initializer=tf.ones([3]))
        var = de.get_variable("only", dim=2, initializer=1.0)
        ids = _ids([1, 2])
        optimizer = de.DynamicEmbeddingOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0))
        train_op = optimizer.minimize(loss_of(var, ids))
        session.run(tf.compat.v1.global_variables_initializer())
        session.run(train_op)
        return session.run(var.lookup(ids)).tolist()


def test_a_loss_of_only_a_table_trains_it_beside_an_unrelated_variable(de):
    rows = _table_only_training(de, lambda var, ids: tf.reduce_sum(de.embedding_lookup(var, ids)))
    assert rows == [[0.0, 0.0], [0.0, 0.0]]


def test_minimize_takes_a_callable_loss(de):
    rows = _table_only_training(de, lambda var, ids: lambda: tf.reduce_sum(de.embedding_lookup(var, ids)))
    assert rows == [[0.0, 0.0], [0.0, 0.0]]


def test_a_saver_var_list_with_a_variable_saves_and_restores_its_rows(de, tmp_path):
    path = str(tmp_path / "model")
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        dense = tf.compat.v1.Variable(10.0, name="v0")
        var = de.Variable(name="t1", dim=1, initializer=-1.0)
        saver = tf.compat.v1.train.Saver(var_list=[dense, var])
        session.run(tf.compat.v1.global_variables_initializer())
        session.run(var.upsert(_ids([0, 1, 2]), [[0.0], [1.0], [2.0]]))
        saver.save(session, path)
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        dense = tf.compat.v1.Variable(-1.0, name="v0")
        var = de.Variable(name="t1", dim=1, initializer=-1.0)
        session.run(var.upsert(_ids([0, 7]), [[12.0], [24.0]]))
        tf.compat.v1.train.Saver(var_list=[dense, var]).restore(session, path)
        assert session.run(dense) == 10.0 and session.run(var.size()) == 3
        assert session.run(var.lookup(_ids([7, 0, 1, 2]))).tolist() == [[-1.0], [0.0], [1.0], [2.0]]


def test_restrict_policy_status_and_apply_update(de):
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        var = de.get_variable("freq", dim=2, initializer=-0.1, devices=["/CPU:0", "/CPU:0"])
        ids = tf.compat.v1.placeholder(tf.int64)
        policy = de.FrequencyRestrictPolicy(var)
        update = policy.apply_update(ids)
        assert session.run(policy.status.size()) == 0
        session.run(update, {ids: [0, 1, 2]})
        session.run(update, {ids: [1, 2, 3, 3]})
        keys, counts = session.run(policy.status.export())
        assert dict(zip(keys.tolist(), counts.tolist(), strict=True)) == {0: 1, 1: 2, 2: 2, 3: 1}
        # An id recorded reads its initial row, not an empty one.
        assert np.allclose(session.run(var.lookup(_ids([3]))), [[-0.1, -0.1]])


def test_table_ops_on_a_sharded_table():
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        table = tables.get_table("ops", 2, devices=["/CPU:0"] * 3, initializer=None)
        ids = _ids([1, 2, 3, 40, 50])
        session.run(table_ops.insert(table, ids, tf.reshape(tf.range(10, dtype=tf.float32), [5, 2])))
        assert session.run(table_ops.size(table)) == 5
        assert session.run(table_ops.contains(table, _ids([[1, 9], [40, 7]]))).tolist() == [
            [True, False],
            [True, False],
        ]
        assert session.run(tables.lookup(table, _ids([50]))).tolist() == [[8.0, 9.0]]
        session.run(table_ops.remove(table, _ids([3, 99])))
        exported_ids, rows = session.run(table_ops.export(table))
        assert dict(zip(exported_ids.tolist(), rows.tolist(), strict=True)) == {
            1: [0, 1],
            2: [2, 3],
            40: [6, 7],
            50: [8, 9],
        }
        session.run(table_ops.clear(table))
        assert session.run(table_ops.size(table)) == 0


def test_an_upserted_row_starts_its_slots_at_their_initial_values(de):
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        var = de.get_variable("seeded", dim=1, initializer=0.0)
        session.run(var.upsert(_ids([3]), [[1.0]]))  # before the optimizer and its slots exist, as TFRA's tests do
        rows, wrapper = de.embedding_lookup(var, _ids([3]), return_trainable=True)
        optimizer = de.DynamicEmbeddingOptimizer(
            tf.compat.v1.train.AdagradOptimizer(0.5, initial_accumulator_value=0.1)
        )
        train_op = optimizer.minimize(tf.reduce_sum(rows), var_list=[wrapper])
        session.run(tf.compat.v1.global_variables_initializer())
        session.run(train_op)
        # TF's Adagrad: accumulator 0.1 + 1, row 1 - 0.5 / sqrt(1.1) (an accumulator from 0 would give 0.5).
        assert np.allclose(session.run(var.lookup(_ids([3]))), [[1.0 - 0.5 / np.sqrt(1.1)]])


def test_int32_values_are_kept_exactly_and_read_back_as_int32(de):
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        var = de.get_variable("ints", tf.int64, tf.int32, initializer=-1)
        session.run(var.upsert(_ids([[0, 1], [2, 3]]), tf.constant([[[0], [1]], [[2], [2**31 - 1]]], tf.int32)))
        rows = var.lookup(_ids([3, 1, 4]))
        assert rows.dtype == tf.int32 and session.run(rows).tolist() == [[2**31 - 1], [1], [-1]]
        assert var.trainable is False  # never trained, as TFRA could not train integer values


def test_glorot_rows_are_drawn_per_id_with_the_fans_of_the_lookup(de):
    # TFRA 0.7.2 drew [ids, dim] with fan_in = the ids read: every id its own row, stddev sqrt(2 / (ids + dim)).
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        var = de.get_variable("glorot", dim=8, initializer=tf.keras.initializers.get("glorot_normal"))
        rows = session.run(de.embedding_lookup(var, _ids(list(range(4000)))))
        assert len(np.unique(rows, axis=0)) == 4000
        assert abs(rows.std() / np.sqrt(2.0 / 4008) - 1.0) < 0.05


def test_bfloat16_rows_are_kept_as_float32_read_as_bfloat16_and_trained(de):
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        var = de.get_variable("bf16", tf.int64, tf.bfloat16, dim=2, initializer=0.5)
        session.run(var.upsert(_ids([1, 2]), tf.constant([[1.0, 2.0], [3.0, 4.0]], tf.bfloat16)))
        rows, exists = var.lookup(_ids([1, 3]), return_exists=True)
        assert rows.dtype == tf.bfloat16
        found, found_exists = session.run([rows, exists])
        assert found.astype(np.float32).tolist() == [[1.0, 2.0], [0.5, 0.5]] and found_exists.tolist() == [True, False]
        embedded = de.embedding_lookup(var, _ids([1, 2]), name="bf16_lookup")
        loss = tf.reduce_sum(tf.square(tf.cast(embedded, tf.float32)))
        session.run(de.DynamicEmbeddingOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1)).minimize(loss))
        trained = session.run(var.lookup(_ids([1, 2]))).astype(np.float32)
        # row - 0.1 * 2 * row, read back rounded to bfloat16 (8 bits of mantissa).
        assert np.allclose(trained, [[0.8, 1.6], [2.4, 3.2]], rtol=1 / 128)


def test_timestamp_policy_without_a_global_step_orders_ids_by_wall_clock(de, monkeypatch):
    # TFRA's timestamp was the wall-clock second; a graph with no global step used to mark every id at 0.
    clock = [1_000.2]
    monkeypatch.setattr(tf, "timestamp", lambda: tf.numpy_function(lambda: np.float64(clock[0]), [], tf.float64))
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        var = de.get_variable("stamps", dim=2, initializer=-0.1, devices=["/CPU:0", "/CPU:0"])
        ids = tf.compat.v1.placeholder(tf.int64)
        policy = de.TimestampRestrictPolicy(var)
        update = policy.apply_update(ids)
        session.run(update, {ids: [0, 1, 2]})
        clock[0] = 1_003.7
        session.run(update, {ids: [1, 2, 3]})
        keys, stamps = session.run(policy.status.export())
        assert dict(zip(keys.tolist(), stamps.tolist(), strict=True)) == {0: 1000, 1: 1003, 2: 1003, 3: 1003}


def test_a_trainable_wrapper_is_its_rows_in_a_loss(de):
    # TFRA's own save/restore test trains `var0 * var0`, the wrapper used as the tensor of its rows.
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        params = de.get_variable("wrapped", dim=2, initializer=0.5)
        _, var0 = de.embedding_lookup(params, _ids([1, 2]), return_trainable=True, name="w")
        loss = tf.reduce_sum(var0 * var0) + tf.reduce_sum(-var0)
        step = de.DynamicEmbeddingOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1)).minimize(
            lambda: loss, var_list=[var0]
        )
        session.run(tf.compat.v1.global_variables_initializer())
        session.run(step)
        # d/dx (x^2 - x) at 0.5 is 0: the rows stay; a second wrapper op reads them as a tensor too.
        assert np.allclose(session.run(tf.convert_to_tensor(var0)), [[0.5, 0.5], [0.5, 0.5]])
        assert var0 in [var0] and var0 != _  # identity equality, as a var_list needs


def test_wrappers_and_shard_tables_are_named_as_tfra_named_them(de):
    with tf.Graph().as_default():
        ids = _ids([0, 1, 2])
        sparse = tf.SparseTensor(tf.constant([[0, 0], [1, 0]], tf.int64), _ids([3, 4]), tf.constant([2, 2], tf.int64))
        named = []
        for _ in range(2):
            with tf.compat.v1.variable_scope("test", reuse=tf.compat.v1.AUTO_REUSE):
                p1 = de.get_variable(name="p1")
                with tf.compat.v1.variable_scope("q"):
                    named.append(de.embedding_lookup(p1, ids, name="emb", return_trainable=True)[1].name)
                    named.append(de.embedding_lookup_sparse(p1, sparse, None, name="sp", return_trainable=True)[1].name)
                    named.append(
                        de.safe_embedding_lookup_sparse(p1, sparse, name="safe", return_trainable=True)[1].name
                    )
        assert named == [
            "test/q/emb/emb:0",
            "test/q/sp/embedding_lookup/sp/embedding_lookup:0",
            "test/q/safe/embedding_lookup_sparse/embedding_lookup/safe/embedding_lookup_sparse/embedding_lookup:0",
            "test/q/emb/emb_1:0",
            "test/q/sp/embedding_lookup/sp/embedding_lookup_1:0",
            "test/q/safe/embedding_lookup_sparse/embedding_lookup/safe/embedding_lookup_sparse/embedding_lookup_1:0",
        ]
        assert p1.tables[0].name == "test_p1_mht_1of1"


def test_a_saver_of_the_variables_and_slots_tables_saves_each_once(de, tmp_path):
    # TFRA's test_training_save_restore: Saver(params.tables + each slot's tables), Adam, restored whole.
    with tf.Graph().as_default():
        opt = de.DynamicEmbeddingOptimizer(tf.compat.v1.train.AdamOptimizer(0.3))
        params = de.get_variable("saved", dim=3, initializer=tf.compat.v1.random_normal_initializer(0.0, 0.01))
        _, var0 = de.embedding_lookup(params, _ids([1, 2, 5]), return_trainable=True, name="ff")
        step = opt.minimize(lambda: var0 * var0, var_list=[var0])
        slots = params.get_slot_variables(opt)
        saver = tf.compat.v1.train.Saver([*params.tables, *[t for slot in slots for t in slot.tables]])
        exports = [params.export(), *[slot.export() for slot in slots]]
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            for _ in range(3):
                session.run(step)
            before = session.run(exports)
            saver.save(session, str(tmp_path / "hash"))
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            assert session.run(params.size()) == 0
            saver.restore(session, str(tmp_path / "hash"))
            after = session.run(exports)
    assert len(slots) == 2
    for (ids_before, rows_before), (ids_after, rows_after) in zip(before, after, strict=True):
        assert sorted(ids_before.tolist()) == sorted(ids_after.tolist()) == [1, 2, 5]
        assert np.allclose(np.sort(rows_before, axis=0), np.sort(rows_after, axis=0))


def test_shard_tables_save_and_load_tfra_key_value_files(de, tmp_path):
    # TFRA's raw format: DIR/NAME-keys holds the int64 keys' bytes, DIR/NAME-values the float32 rows'.
    folder = f"file://{tmp_path}/kv"
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        table = de.Variable(key_dtype=tf.int64, value_dtype=tf.float32, initializer=-1.0, name="t1", dim=2)
        session.run(table.upsert(_ids([0, 1, 2]), tf.constant([[0.0, 0.5], [1.0, 1.5], [2.0, 2.5]])))
        session.run([t.save_to_file_system(f"{folder}/{k}") for k, t in enumerate(table.tables)])
    keys = np.fromfile(tmp_path / "kv" / "0" / "t1_mht_1of1-keys", np.int64)
    values = np.fromfile(tmp_path / "kv" / "0" / "t1_mht_1of1-values", np.float32).reshape(-1, 2)
    assert dict(zip(keys.tolist(), values.tolist(), strict=True)) == {0: [0, 0.5], 1: [1, 1.5], 2: [2, 2.5]}
    # Files of another sharding (TFRA's, here made by hand) load onto this one's shards.
    np.array([7, 8], np.int64).tofile(tmp_path / "kv" / "theirs-keys")
    np.array([[7, 7], [8, 8]], np.float32).tofile(tmp_path / "kv" / "theirs-values")
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        table = de.Variable(name="t1", dim=2, initializer=-1.0, devices=["/CPU:0", "/CPU:0"])
        session.run(table.tables[1].load_from_file_system(f"{folder}/0", file_name="t1_mht_1of1"))
        session.run(table.tables[0].load_from_file_system(f"{folder}", file_name="theirs"))
        assert session.run(table.size()) == 5
        assert session.run(table.lookup(_ids([2, 8, 9]))).tolist() == [[2, 2.5], [8, 8], [-1, -1]]
        np.array([1, 2, 3], np.int64).tofile(tmp_path / "kv" / "short-keys")
        np.array([[1, 1]], np.float32).tofile(tmp_path / "kv" / "short-values")
        with pytest.raises(tf.errors.InvalidArgumentError, match="keys number in file .*short-keys"):
            session.run(table.tables[0].load_from_file_system(folder, file_name="short"))


def test_a_variable_saves_and_loads_its_shards_files_under_tfra_names(de, tmp_path):
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        table = de.get_variable("scope/t2", dim=1, initializer=-1.0, devices=["/CPU:0", "/CPU:0"])
        session.run(table.upsert(_ids([3, 4, 5, 6]), tf.constant([[3.0], [4.0], [5.0], [6.0]])))
        session.run(table.save_to_file_system(str(tmp_path)))
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"scope_t2_mht_{i}of2_rank0_size1-{part}" for i in (1, 2) for part in ("keys", "values")
    ]
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        table = de.get_variable("scope/t2", dim=1, initializer=-1.0, devices=["/CPU:0"] * 3)
        session.run(table.tables[0].load_from_file_system(str(tmp_path), "scope_t2_mht_1of2", load_entire_dir=True))
        assert session.run(table.lookup(_ids([3, 4, 5, 6, 7]))).ravel().tolist() == [3, 4, 5, 6, -1]


def test_a_variable_lookup_of_keys_of_another_dtype_is_tfras_value_error(de):
    # TFRA's table converted the keys to its key dtype: a ValueError (embedding_lookup's is a TypeError).
    with tf.Graph().as_default():
        table = de.get_variable("typed", dim=1)
        with pytest.raises(ValueError, match="Signature mismatch. Keys must be dtype tf.int64, got tf.int32"):
            table.lookup(tf.constant([1, 2], tf.int32))
