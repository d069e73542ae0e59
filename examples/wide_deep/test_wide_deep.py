"""The click model trains with its README's launch_local.py command (fewer steps); its workers read disjoint shards."""

import os

import pytest

from tests.taskrun import REPO, python_command, run_tasks

LAUNCHER = os.path.join(REPO, "scripts", "launch_local.py")
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.slow
def test_wide_deep_clicks_trains_over_two_ps(tmp_path):
    flags = ["--num_ps=2", "--num_workers=2", "--model_fn=clicks_wide_deep:model_fn"]
    flags += ["--input_fn=clicks_wide_deep:input_fn", "--eval_input_fn=clicks_wide_deep:eval_input_fn"]
    flags += ["--optimizer=adagrad", "--train_steps=400", f"--export_dir={tmp_path / 'export'}"]
    command = python_command(LAUNCHER, f"--log_dir={tmp_path / 'run'}", "--quiet", "--nochart", *flags)
    outcome = run_tasks({"launcher": command}, timeout=300, env={"PYTHONPATH": HERE})["launcher"]
    assert outcome.returncode == 0, outcome.describe()
    auc = float(outcome.stdout.split("eval auc ")[1].split(",")[0])
    assert auc > 0.65, outcome.stdout  # chance is 0.5
    assert (tmp_path / "export" / "saved_model.pb").exists()


def test_wide_deep_workers_read_disjoint_shards(monkeypatch):
    monkeypatch.syspath_prepend(HERE)
    import clicks_wide_deep

    from ps_toolkit.training.model_api import InputContext

    def rows(index: int) -> set:
        dataset = clicks_wide_deep.input_fn(InputContext(2, index, 256), {})
        found = set()
        for features, labels in dataset.take(20):
            columns = [features[name].numpy() for name in ("user_id", "ad_id", "site_id", "hour", "price")]
            found.update(zip(*columns, labels.numpy(), strict=True))
        return found

    first, second = rows(0), rows(1)
    assert len(first) > 4000 and len(second) > 4000
    assert not first & second
