"""Dynamic tables through the toolkit's step, in one process: async loop, sync, restart into more ps, export.

The example's click model (examples/dynamic_clicks) on an in-process cluster
of real TensorFlow servers: its tables are sharded over the ps tasks, trained
by the toolkit's optimizer, measured in the result, restored from the
chief's checkpoint into a job with another number of ps, and exported.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from ps_toolkit import dynamic_embedding as de
from ps_toolkit.base.errors import ConfigError
from ps_toolkit.launch.local_cluster import InProcessCluster
from ps_toolkit.task.roles import trainer
from ps_toolkit.training import export
from ps_toolkit.training.config import TrainConfig
from ps_toolkit.training.model_api import InputContext, ModeKeys, ModelDefinition
from ps_toolkit.training.model_calls import call_model_fn

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "dynamic_clicks")
sys.path.insert(0, EXAMPLE)
import dynamic_clicks  # noqa: E402

TABLES = ("model/user", "model/item")


def _definition(**params):
    return ModelDefinition(
        dynamic_clicks.model_fn, dynamic_clicks.input_fn, dynamic_clicks.eval_input_fn, params, name="dynamic_clicks"
    )


def _train(tmp_path, num_ps=2, params=None, **config):
    settings = {"train_steps": 30, "batch_size": 32, "optimizer": "adagrad", "learning_rate": 0.5, **config}
    config = TrainConfig(checkpoint_dir=str(tmp_path), **settings)
    with InProcessCluster(num_ps=num_ps, num_workers=1) as cluster:
        return trainer.train(
            cluster.cluster_config("worker", 0), cluster.targets["worker"][0], config, _definition(**(params or {}))
        )


def test_async_in_graph_loop_trains_both_tables_on_every_ps_and_reports_them(tmp_path):
    result = _train(tmp_path, optimizer="adam", learning_rate=0.05, steps_per_run=10, params={"evict_after_steps": 10})
    assert result["global_step"] == 30
    for name in TABLES:
        table = result["tables"][name]
        assert all(rows > 0 for rows in table["rows_per_shard"]), table
        assert table["admitted"] >= table["rows"] > 0 and table["evicted"] > 0, table
        assert table["rows"] == table["admitted"] - table["evicted"]
        # Bounded by default from each ps's memory, which is far from reached here; bytes measured per shard.
        assert table["bound"] == "default" and all(bound > 10_000 for bound in table["max_rows_per_shard"]), table
        assert len(table["bytes_per_shard"]) == 2 and all(b > 0 for b in table["bytes_per_shard"]), table
        steps = [entry["global_step"] for entry in table["history"]]
        assert steps == sorted(steps) and steps[-1] == 30


def test_sync_replicas_train_the_tables(tmp_path):
    result = _train(tmp_path, sync_replicas=True, train_steps=20)
    assert result["global_step"] == 20
    assert all(result["tables"][name]["rows"] > 0 for name in TABLES)
    assert result["final_loss"] < result["first_loss"] + 0.1


def test_sync_replicas_train_the_tables_in_the_in_graph_loop(tmp_path):
    result = _train(tmp_path, sync_replicas=True, steps_per_run=5, train_steps=20)
    assert result["global_step"] == 20
    assert all(min(result["tables"][name]["rows_per_shard"]) > 0 for name in TABLES)


def test_string_ids_are_refused_by_sync_training_in_one_line():
    with tf.Graph().as_default():
        table = de.get_table("words", 2, key_dtype=tf.string)
        loss = tf.reduce_sum(de.lookup(table, tf.constant(["a"])))
        with pytest.raises(ConfigError, match="'words': sync training takes int64 ids only"):
            de.sync_gradients(de.table_gradients(loss))


def test_a_two_ps_checkpoint_restores_into_three_ps_and_exports(tmp_path):
    first = _train(tmp_path / "run")
    saved = _table_contents(str(tmp_path / "run"))
    # Training is over: the 3-ps job restores, measures, takes the one step a session always runs, saves.
    again = _train(tmp_path / "run", num_ps=3, train_steps=30)
    resaved = _table_contents(str(tmp_path / "run"))
    for name in TABLES:
        assert again["tables"][name]["history"][0]["rows"] == first["tables"][name]["rows"] == len(saved[name])
        assert len(again["tables"][name]["rows_per_shard"]) == 3
        # Written back by 3 shards row for row, but for the at most 32 ids of that one step.
        unchanged = [i for i, row in saved[name].items() if resaved[name].get(i) == row]
        assert len(unchanged) >= len(saved[name]) - 32, (len(unchanged), len(saved[name]))
    path = export.export_saved_model(
        _definition(), InputContext(1, 0, 32), str(tmp_path / "run"), str(tmp_path / "export")
    )
    users, items = [1, 2, 3, 987654321], [10000001, 10000002, 5, 10000003]
    expected = _predict_from_checkpoint(str(tmp_path / "run"), users, items)
    served = _serve_with_tensorflow_only(path, users, items)
    np.testing.assert_allclose(served, expected, rtol=1e-5)


def _table_contents(checkpoint_dir) -> dict:
    """{table: {id: row as a tuple}} from the newest checkpoint's save buckets."""
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(checkpoint_dir))
    contents = {}
    for name in TABLES:
        rows = {}
        for bucket in range(de.NUM_SAVE_BUCKETS):
            ids = reader.get_tensor(f"{name}/rows/bucket_{bucket:02d}/keys")
            values = reader.get_tensor(f"{name}/rows/bucket_{bucket:02d}/values")
            rows.update({int(i): tuple(v.tolist()) for i, v in zip(ids, values, strict=True)})
        contents[name] = rows
    return contents


def _predict_from_checkpoint(checkpoint_dir, users, items):
    with tf.Graph().as_default():
        features = {"user": tf.constant(users, tf.int64), "item": tf.constant(items, tf.int64)}
        spec = call_model_fn(_definition(), features, None, ModeKeys.PREDICT)
        with tf.compat.v1.Session() as session:
            tf.compat.v1.train.Saver().restore(session, tf.train.latest_checkpoint(checkpoint_dir))
            return session.run(spec.predictions["probability"])


SERVE = """
import json, sys
import tensorflow as tf
serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
out = serve(user=tf.constant(json.loads(sys.argv[2]), tf.int64), item=tf.constant(json.loads(sys.argv[3]), tf.int64))
assert not [m for m in sys.modules if m.startswith("ps_toolkit")]
print(json.dumps(out["probability"].numpy().tolist()))
"""


def _serve_with_tensorflow_only(path, users, items):
    command = [sys.executable, "-c", SERVE, path, json.dumps(users), json.dumps(items)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd="/", check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return np.array(json.loads(done.stdout.strip().splitlines()[-1]))


def test_an_admission_threshold_below_1_from_the_cli_is_one_line_and_exit_2(tmp_path):
    from tests.taskrun import REPO, python_command, run_tasks
    from tests.test_bad_input import OK_HOSTS, assert_clean_failure

    args = OK_HOSTS + ["--job_name=worker", "--task_index=0", f"--checkpoint_dir={tmp_path}/ckpt"]
    args += ["--model_fn=dynamic_clicks:model_fn", "--input_fn=dynamic_clicks:input_fn", '--params={"admit_after": 0}']
    command = python_command(os.path.join(REPO, "scripts", "run_task.py"), *args)
    outcome = run_tasks({"chief": command}, timeout=90, env={"PYTHONPATH": EXAMPLE})["chief"]
    assert_clean_failure(
        outcome, "dynamic table 'model/user': admit_after=0 must be an integer >= 1 (an admission threshold below 1"
    )
