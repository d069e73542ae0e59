"""The dynamic-table click model trains with its README's launch_local.py commands (fewer steps), async and sync."""

import json
import os

import pytest

from tests.taskrun import REPO, python_command, run_tasks

LAUNCHER = os.path.join(REPO, "scripts", "launch_local.py")
HERE = os.path.dirname(os.path.abspath(__file__))


def _chief_result(run_dir) -> dict:
    """The chief's JSON result line, from its log in the run folder."""
    with open(run_dir / "worker-0.log", encoding="utf-8") as handle:
        lines = [line[line.index("{") :] for line in handle if '{"job": "worker", "task": 0,' in line]
    assert lines, f"no result line in {run_dir / 'worker-0.log'}"
    return json.loads(lines[-1])


@pytest.mark.slow
@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
def test_dynamic_clicks_trains_over_two_ps(tmp_path, sync):
    flags = ["--num_ps=2", "--num_workers=2", "--model_fn=dynamic_clicks:model_fn"]
    flags += ["--input_fn=dynamic_clicks:input_fn", "--eval_input_fn=dynamic_clicks:eval_input_fn"]
    flags += ["--optimizer=adagrad", "--learning_rate=0.5", "--batch_size=128", "--train_steps=200"]
    flags += ['--params={"evict_after_steps": 50}', f"--export_dir={tmp_path / 'export'}"]
    flags += ["--sync_replicas"] if sync else []
    command = python_command(LAUNCHER, f"--log_dir={tmp_path / 'run'}", "--quiet", "--nochart", *flags)
    outcome = run_tasks({"launcher": command}, timeout=400, env={"PYTHONPATH": HERE})["launcher"]
    assert outcome.returncode == 0, outcome.describe()
    result = _chief_result(tmp_path / "run")
    for name in ("model/user", "model/item"):
        table = result["tables"][name]
        assert len(table["rows_per_shard"]) == 2 and min(table["rows_per_shard"]) > 0, table
        assert table["admitted"] > table["rows"] > 0 and table["evicted"] > 0, table  # grew, then shrank
    assert (tmp_path / "export" / "saved_model.pb").exists()


def test_new_ids_arrive_as_training_goes_on(monkeypatch):
    monkeypatch.syspath_prepend(HERE)
    import dynamic_clicks
    import tensorflow as tf

    from ps_toolkit.training.model_api import InputContext

    batches = list(dynamic_clicks.input_fn(InputContext(2, 0, 256), {"new_ids_per_batch": 500}).take(12))
    early = set(tf.concat([b[0]["user"] for b in batches[:5]], 0).numpy())
    late = set(tf.concat([b[0]["user"] for b in batches[-5:]], 0).numpy())
    # Batch i draws from the first 2000 + 500 i ids: the last five reach ids the first five cannot.
    assert max(late) > dynamic_clicks.DEFAULTS["first_vocab"] + 4 * 500 >= max(early)
    other = next(iter(dynamic_clicks.input_fn(InputContext(2, 1, 256), {}).take(1)))[0]["user"].numpy()
    assert list(other) != list(batches[0][0]["user"].numpy())  # each replica draws its own batches
