"""The ctr benchmark's pieces: its data, what a step must move, its records' names, and the toolkit's lookups.

Fast and untimed: a tiny table and a handful of batches, in this process.
"""

import dataclasses
import json

import numpy as np
import pytest
import tensorflow as tf

from benchmarks import checkpoint_sizes, ctr_bytes, ctr_data, ctr_model, driver, measure, plan, protocol, systems
from benchmarks.cluster_run import ClusterOutcome, Task, TaskResult
from ps_toolkit.training import sparse_lookup

TINY = ctr_data.CtrShape(vocab=1000, dim=4, batch_size=256)
ISSUE_NAMES = ("model", "ids", "steps_per_sec", "cpu_ms_per_example", "bytes_per_step")
ISSUE_NAMES += ("unique_row_bytes_per_step", "auc", "shutdown_s")


def _batch(law, seed=1, index=0, shape=TINY):
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        return session.run(ctr_data.make_batch(seed, index, law, shape))


def test_batches_are_deterministic_by_seed_and_index_and_in_range():
    (first, labels), (again, labels_again) = _batch("zipf1.05"), _batch("zipf1.05")
    np.testing.assert_array_equal(first["ids"], again["ids"])
    np.testing.assert_array_equal(labels, labels_again)
    other, _ = _batch("zipf1.05", index=1)
    assert not np.array_equal(first["ids"], other["ids"])
    assert first["ids"].shape == (TINY.batch_size, ctr_data.FIELDS)
    assert first["dense"].shape == (TINY.batch_size, ctr_data.DENSE_FEATURES)
    assert first["ids"].min() >= 0 and first["ids"].max() < TINY.vocab
    assert 0.2 < labels.mean() < 0.8  # both classes: AUC means something


def test_zipf_ids_repeat_more_than_uniform_and_match_the_expected_distinct_count():
    shape = ctr_data.CtrShape(vocab=100_000, dim=4, batch_size=512)
    distinct = {}
    for law in ctr_data.ID_LAWS:
        features, _ = _batch(law, shape=shape)
        distinct[law] = ctr_data.unique_rows(features["ids"], shared_table=False)
        expected = ctr_bytes.FIELDS * ctr_bytes.distinct_per_field(law, shape.vocab, shape.batch_size)
        assert distinct[law] == pytest.approx(expected, rel=0.05), law
    assert distinct["uniform"] > distinct["zipf1.05"] > distinct["zipf1.2"]


def test_auc_is_exact_with_ties():
    assert ctr_data.auc(np.array([0, 0, 1, 1]), np.array([0.1, 0.4, 0.35, 0.8])) == pytest.approx(0.75)
    assert ctr_data.auc(np.array([0, 1]), np.array([0.5, 0.5])) == pytest.approx(0.5)


def _lookup_and_gradients(options, shared_rows=False):
    """(rows looked up, gradient rows and indices per table part) for two small partitioned tables."""
    graph = tf.Graph()
    with graph.as_default():
        partitioner = tf.compat.v1.fixed_size_partitioner(2)
        init = tf.compat.v1.random_normal_initializer(seed=3)
        tables = [
            tf.compat.v1.get_variable(f"t{i}", [10, 3], initializer=init, partitioner=partitioner) for i in (0, 1)
        ]
        ids = [tf.constant([[1, 7, 1], [7, 7, 2]], tf.int64), tf.constant([9, 0, 9, 9], tf.int64)]
        rows = sparse_lookup.embedding_lookups(tables, ids, options)
        reference = [tf.nn.embedding_lookup(t, i) for t, i in zip(tables, ids, strict=True)]
        loss = sum(tf.reduce_sum(r * r) for r in rows)
        parts = [part for table in tables for part in table]
        gradients = tf.gradients(loss, parts)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            got, want = session.run((rows, reference))
            grads = session.run([(g.indices, g.values) for g in gradients if g is not None])
    return got, want, grads


@pytest.mark.parametrize(
    "options",
    [
        sparse_lookup.LookupOptions(),
        sparse_lookup.LookupOptions(unique_ids=False),
        sparse_lookup.LookupOptions(group_by_ps=False),
        sparse_lookup.LookupOptions(unique_ids=False, group_by_ps=False),
    ],
)
def test_lookups_equal_embedding_lookup_whatever_the_levers(options):
    got, want, _ = _lookup_and_gradients(options)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_unique_ids_push_each_row_once_with_its_gradients_summed():
    _, want, grads = _lookup_and_gradients(sparse_lookup.LookupOptions())
    # Table 0's ids 1, 7, 1, 7, 7, 2 touch rows 1 and 2 (part 0) and 7 (part 1, local row 2), once each.
    indices = sorted(int(i) for part_indices, _ in grads[:2] for i in part_indices)
    assert indices == [1, 2, 2]
    part1_indices, part1_values = grads[1]
    # Row 7 was looked up three times: d(sum r^2)/dr = 2r, three times over, summed.
    np.testing.assert_allclose(part1_values[list(part1_indices).index(2)], 3 * 2 * want[0][0, 1], rtol=1e-5)


def test_bfloat16_on_the_wire_is_close_to_float32():
    got, want, _ = _lookup_and_gradients(sparse_lookup.LookupOptions(wire_dtype="bfloat16"))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-2, atol=1e-2)


PER_FIELD_SYSTEMS = (systems.TOOLKIT, systems.TOOLKIT_DYNAMIC, systems.RAW, systems.TF2)
PER_FIELD_SYSTEMS += (systems.TOOLKIT_TFRA, systems.TFRA_TF2_15)


def test_quick_plan_has_every_system_and_id_law_for_ctr():
    configs = [c for c in plan.quick(("ctr",)) if c.model == "ctr"]
    pairs = {(c.system, c.ctr.ids) for c in configs if c.ctr.tables == "per_field"}
    assert pairs == {(s, law) for s in PER_FIELD_SYSTEMS for law in ctr_data.ID_LAWS}
    assert {c.ctr.tables for c in configs} == {"per_field", "shared"}
    # The dynamic tables a table per field, as users write them, and one table the fields share.
    dynamic = [c for c in configs if c.system == systems.TOOLKIT_DYNAMIC]
    tables = ("per_field", "shared")
    assert sorted((c.ctr.ids, c.ctr.tables) for c in dynamic) == sorted(
        (law, t) for law in ctr_data.ID_LAWS for t in tables
    )
    assert all(c.ctr.vocab == 1_000_000 for c in configs)
    assert all((c.num_ps, c.num_workers, c.mode) == (2, 2, systems.ASYNC) for c in configs)


def test_the_dynamic_system_tells_the_model_fn_to_use_dynamic_tables():
    config = next(c for c in plan.ctr_configs(vocab=1000) if c.system == systems.TOOLKIT_DYNAMIC)
    argv = systems.tasks(config, [1, 2, 3, 4], "/tmp/ckpt", "/tmp/data")[2].argv
    params = json.loads(next(a for a in argv if a.startswith("--params="))[len("--params=") :])
    assert params["dynamic"] is True and params["vocab"] == 1000
    plain = next(c for c in plan.ctr_configs(vocab=1000) if c.system == systems.TOOLKIT)
    argv = systems.tasks(plain, [1, 2, 3, 4], "/tmp/ckpt", "/tmp/data")[2].argv
    assert "dynamic" not in next(a for a in argv if a.startswith("--params="))


def _ctr_outcome():
    def result(name, markers, exited_at, loopback):
        samples = [(m, {"worker0": 0.01 * m["time"], "worker1": 0.01 * m["time"]}) for m in markers]
        lines = [protocol.MARKER + json.dumps(m) for m in markers]
        return TaskResult(Task(name, []), lines, samples, loopback, returncode=0, exited_at=exited_at)

    worker0 = [
        {"event": "first_step", "time": 1.0, "global_step": 1},
        {"event": "warm", "time": 2.0, "global_step": 100},
        {"event": "tick", "time": 4.0, "global_step": 300},
        {"event": "done", "time": 5.0, "global_step": 400, "auc": 0.71},
    ]
    worker1 = [
        {"event": "first_step", "time": 1.5, "global_step": 2},
        {"event": "warm", "time": 2.5, "global_step": 110},
        {"event": "done", "time": 5.1, "global_step": 401, "auc": 0.71},
    ]
    results = {
        "worker0": result("worker0", worker0, 5.5, [0, 1_000, 201_000, 500_000]),
        "worker1": result("worker1", worker1, 5.6, [0, 11_000, 600_000]),
    }
    return ClusterOutcome(launched_at=0.0, results=results, training_over_at=5.0)


def test_ctr_records_carry_the_issues_names_and_bytes_from_the_loopback_window():
    figures = measure.figures(_ctr_outcome())
    # From the last warm (worker1, step 110, 11,000 bytes) to the last tick (step 300, 201,000 bytes).
    assert figures.bytes_per_step == pytest.approx(190_000 / 190)
    assert figures.auc == pytest.approx(0.71)
    config = plan.ctr_configs(vocab=1000, dim=4)[0]
    record = driver.record(config, [figures, figures, figures], [])
    missing = [name for name in ISSUE_NAMES if name not in record]
    assert not missing
    assert record["model"] == "ctr" and record["ids"] in ctr_data.ID_LAWS
    assert record["bytes_per_step"] == pytest.approx(1000)
    assert record["cpu_ms_per_example"] == pytest.approx(record["cpu_ms_per_step"] / 512, abs=1e-4)
    assert 0 < record["unique_row_bytes_per_step"] < record["needed_bytes_per_step"]
    assert record["shutdown_s"] == pytest.approx(0.5)
    assert record["repetitions"] == 3


@pytest.mark.parametrize("tables", ["per_field", "shared"])
def test_dynamic_rows_read_one_row_per_field_and_the_same_row_for_the_same_id(tables):
    with tf.Graph().as_default():
        ids = tf.constant(np.array([[3] * ctr_data.FIELDS, [3] * ctr_data.FIELDS], dtype=np.int64))
        rows = ctr_model.dynamic_rows(ids, {"tables": tables, "vocab": 100, "dim": 4})
        with tf.compat.v1.Session() as session:
            session.run([tf.compat.v1.global_variables_initializer(), tf.compat.v1.tables_initializer()])
            values = session.run(rows)
    assert values.shape == (2, ctr_data.FIELDS, 4)
    np.testing.assert_array_equal(values[0], values[1])
    # Field f's id 3 is another id of a shared table (offset by field): another initial row.
    assert not np.allclose(values[0, 0], values[0, 1])


def _write_checkpoint(folder, prefix: str, data_bytes: int) -> None:
    (folder / f"{prefix}.index").write_bytes(b"i" * 100)
    (folder / f"{prefix}.data-00000-of-00001").write_bytes(b"d" * data_bytes)


def test_ctr_records_carry_the_whole_checkpoint_and_its_deltas_sizes(tmp_path):
    _write_checkpoint(tmp_path, "model.ckpt-200", 10_000)
    _write_checkpoint(tmp_path, "model.ckpt-200.delta-301", 2_000)
    _write_checkpoint(tmp_path, "model.ckpt-600", 30_000)
    state = {"base": "model.ckpt-200", "base_step": 160, "delta": "model.ckpt-200.delta-301", "global_step": 301}
    (tmp_path / checkpoint_sizes.DELTA_STATE_FILE).write_text(json.dumps(state))
    sizes = checkpoint_sizes.measure(str(tmp_path))
    assert sizes == {"checkpoint_bytes": 10_100, "delta_bytes": 2_100, "delta_steps": 101}
    figures = dataclasses.replace(measure.figures(_ctr_outcome()), **sizes)
    config = next(c for c in plan.ctr_configs(vocab=1000, dim=4) if c.system == systems.TOOLKIT_DYNAMIC)
    record = driver.record(config, [figures], [])
    assert (record["checkpoint_bytes"], record["delta_bytes_100"], record["delta_steps"]) == (10_100, 2_100, 101)
    assert record["delta_over_checkpoint"] == pytest.approx(0.208)
    # Without a delta (fixed tables): the newest whole checkpoint the state file names.
    (tmp_path / checkpoint_sizes.DELTA_STATE_FILE).unlink()
    (tmp_path / "checkpoint").write_text(f'model_checkpoint_path: "{tmp_path}/model.ckpt-600"\n')
    assert checkpoint_sizes.measure(str(tmp_path)) == {
        "checkpoint_bytes": 30_100,
        "delta_bytes": None,
        "delta_steps": None,
    }


def test_the_toolkits_ctr_runs_with_dynamic_tables_save_by_steps_with_deltas():
    for config in plan.ctr_configs(vocab=1000, dim=4):
        if config.system not in systems.CTR_CHECKPOINT_SYSTEMS:
            continue
        flags = systems.tasks(config, list(range(config.num_ports)), "/tmp/c", "/tmp/d")[0].argv
        dynamic = config.system == systems.TOOLKIT_DYNAMIC
        assert (f"--save_checkpoint_steps={config.train_steps // 3}" in flags) == dynamic, flags
        assert ("--delta_checkpoint_steps=100" in flags) == dynamic, flags
        assert ("--save_checkpoint_secs=600" in flags) == (not dynamic), flags
