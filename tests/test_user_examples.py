"""The examples of examples/: each trains with the one launch_local.py command its docstring and the README show."""

import os
import sys

import pytest

from tests.taskrun import REPO, python_command, run_tasks

LAUNCHER = os.path.join(REPO, "scripts", "launch_local.py")
EXAMPLES = os.path.join(REPO, "examples")


def _launch(example: str, tmp_path, *flags: str):
    command = python_command(LAUNCHER, f"--log_dir={tmp_path / 'run'}", "--quiet", *flags)
    env = {"PYTHONPATH": os.path.join(EXAMPLES, example)}
    outcome = run_tasks({"launcher": command}, timeout=300, env=env)["launcher"]
    assert outcome.returncode == 0, outcome.describe()
    return outcome.stdout


@pytest.mark.slow
def test_wide_deep_clicks_trains_over_two_ps(tmp_path):
    out = _launch(
        "wide_deep",
        tmp_path,
        "--num_ps=2",
        "--num_workers=2",
        "--model_fn=clicks_wide_deep:model_fn",
        "--input_fn=clicks_wide_deep:input_fn",
        "--eval_input_fn=clicks_wide_deep:eval_input_fn",
        "--optimizer=adagrad",
        "--train_steps=400",
        f"--export_dir={tmp_path / 'export'}",
    )
    auc = float(out.split("eval auc ")[1].split(",")[0])
    assert auc > 0.65, out  # chance is 0.5
    assert (tmp_path / "export" / "saved_model.pb").exists()


@pytest.mark.slow
def test_digits_cnn_trains(tmp_path):
    out = _launch(
        "digits_cnn",
        tmp_path,
        "--model_fn=digits_cnn:model_fn",
        "--input_fn=digits_cnn:input_fn",
        "--eval_input_fn=digits_cnn:eval_input_fn",
        "--optimizer=adam",
        "--train_steps=300",
        "--batch_size=64",
    )
    accuracy = float(out.split("eval accuracy ")[1].split(",")[0])
    assert accuracy > 0.9, out


def test_wide_deep_workers_read_disjoint_shards():
    sys.path.insert(0, os.path.join(EXAMPLES, "wide_deep"))
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
