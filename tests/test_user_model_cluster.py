"""A user's own model (tests/user_models/clicks.py) on a real local cluster, through the CLI.

An embedding table partitioned over 2 ps, Adagrad, an AUC metric: trained
async and sync by scripts/launch_local.py --model_fn=..., every task ends with
status 0, the chief's result line carries the AUC under "eval", the evaluator
evaluates the last checkpoint, and the SavedModel it exports loads and predicts
with both TensorFlow loaders.
"""

import json
import os

import numpy as np
import pytest

from tests.taskrun import REPO, python_command, run_tasks

LAUNCHER = os.path.join(REPO, "scripts", "launch_local.py")
USER_MODELS = os.path.join(REPO, "tests", "user_models")
TRAIN_STEPS = 300


def result_line(log_path: str) -> dict:
    with open(log_path, encoding="utf-8") as handle:
        lines = [line for line in handle if line.startswith("{")]
    return json.loads(lines[-1])


@pytest.mark.slow
@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
def test_embedding_model_trains_evaluates_and_exports(tmp_path, sync):
    run_dir, export_dir = tmp_path / "run", tmp_path / "export"
    command = python_command(
        LAUNCHER,
        "--num_ps=2",
        "--num_workers=2",
        "--evaluator",
        f"--log_dir={run_dir}",
        "--model_fn=clicks:model_fn",
        "--input_fn=clicks:input_fn",
        "--eval_input_fn=clicks:eval_input_fn",
        "--optimizer=adagrad",
        f"--train_steps={TRAIN_STEPS}",
        "--batch_size=64",
        f"--export_dir={export_dir}",
        "--quiet",
        "--nochart",
        *(["--sync_replicas"] if sync else []),
    )
    outcome = run_tasks({"launcher": command}, timeout=240, env={"PYTHONPATH": USER_MODELS})["launcher"]
    assert outcome.returncode == 0, outcome.describe()
    summary = (run_dir / "summary.txt").read_text()
    for task in ("ps:0", "ps:1", "worker:0", "worker:1", "evaluator:0"):
        assert any(line.startswith(task) and " 0 (finished)" in line for line in summary.splitlines()), summary
    chief = result_line(str(run_dir / "worker-0.log"))
    assert chief["global_step"] >= TRAIN_STEPS, chief
    # Chance is 0.5; the rule is learnable.
    assert chief["eval"]["auc"] > 0.75, chief
    assert os.listdir(run_dir / "checkpoints" / "eval"), "no eval summaries"
    evaluator = result_line(str(run_dir / "evaluator-0.log"))
    assert evaluator["global_step"] >= TRAIN_STEPS and evaluator["eval"]["auc"] > 0.75, evaluator
    assert_export_predicts(str(export_dir))


def assert_export_predicts(path: str) -> None:
    import tensorflow as tf

    ids = np.random.default_rng(0).integers(0, 100_000, size=(3, 20)).astype(np.int64)
    dense = np.array([[3.0, 0, 0, 0], [-3.0, 0, 0, 0], [0, 0, 0, 0]], np.float32)
    served = tf.saved_model.load(path).signatures["serving_default"](ids=tf.constant(ids), dense=tf.constant(dense))
    v2 = served["probability"].numpy()
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        signature = tf.compat.v1.saved_model.loader.load(session, ["serve"], path).signature_def["serving_default"]
        feed = {signature.inputs["ids"].name: ids, signature.inputs["dense"].name: dense}
        v1 = session.run(signature.outputs["probability"].name, feed)
    np.testing.assert_allclose(v1, v2, rtol=1e-5)
    # The first dense feature raises the click score: the trained model says so.
    assert v2[0] > v2[2] > v2[1], v2


def test_launcher_refuses_a_model_it_cannot_find_before_any_task_starts(tmp_path):
    command = python_command(
        LAUNCHER, f"--log_dir={tmp_path / 'run'}", "--model_fn=clicks:no_such_fn", "--input_fn=clicks:input_fn"
    )
    outcome = run_tasks({"launcher": command}, timeout=60, env={"PYTHONPATH": USER_MODELS})["launcher"]
    assert outcome.returncode == 2, outcome.describe()
    assert "Traceback" not in outcome.stderr, outcome.describe()
    assert "--model_fn=clicks:no_such_fn: module 'clicks'" in outcome.stderr, outcome.describe()
    assert not (tmp_path / "run").exists() or not list((tmp_path / "run").glob("*.log")), outcome.describe()


@pytest.mark.slow
def test_python_api_takes_each_role_from_tf_config(tmp_path):
    """launch_local.py runs the same script as ps, chief, worker and evaluator; ps_toolkit.train does each role."""
    run_dir = tmp_path / "run"
    script = os.path.join(USER_MODELS, "train_clicks.py")
    command = python_command(
        LAUNCHER,
        "--chief",
        "--num_workers=1",
        "--evaluator",
        f"--log_dir={run_dir}",
        "--quiet",
        "--nochart",
        "--",
        "python",
        script,
        str(tmp_path / "ckpt"),
    )
    outcome = run_tasks({"launcher": command}, timeout=240, env={"PYTHONPATH": USER_MODELS})["launcher"]
    assert outcome.returncode == 0, outcome.describe()
    chief = result_line(str(run_dir / "chief-0.log"))
    assert chief["global_step"] >= 200 and chief["eval"]["auc"] > 0.7, chief
    assert result_line(str(run_dir / "ps-0.log"))["replicas_done"] == 2
    assert result_line(str(run_dir / "evaluator-0.log"))["global_step"] >= 200
