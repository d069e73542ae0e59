"""tf.estimator.train_and_evaluate on a real local cluster (chief, worker, ps, evaluator): every task ends by itself."""

import json
import os
import re

import numpy as np
import pytest
import tensorflow as tf
from fixtures_legacy.eval_summaries import evaluated_steps, final_checkpoint
from fixtures_legacy.launch import launch, legacy

pytestmark = pytest.mark.slow
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures_legacy")
MAX_STEPS = 300
# Each task gets this long to end by itself after the chief; a task still running then is stopped, and fails the test.
LAUNCHER = [
    "--chief",
    "--num_workers=1",
    "--num_ps=1",
    "--evaluator",
    "--success_policy=all_workers",
    "--grace_secs=30",
    "--ps_grace_secs=30",
]
TASKS = ("ps:0", "chief:0", "worker:0", "evaluator:0")


def run_cluster(tmp_path, model: str, *extra: str):
    model_dir = tmp_path / "model"
    script = os.path.join(FIXTURES, "estimator_cluster.py")
    command = legacy(script, f"--model={model}", f"--model_dir={model_dir}", *extra)
    run = launch(tmp_path / "run", LAUNCHER, [*command, f"--max_steps={MAX_STEPS}"], timeout_secs=180)
    assert run.returncode == 0, run.describe()
    summary = (tmp_path / "run" / "summary.txt").read_text()
    for task in TASKS:
        assert re.search(rf"^{task}\s+\S+\s+0 \(finished\)", summary, re.M), summary + run.describe()
    # Every task had ended when the launcher wrote its summary: within the chief's work after its
    # final checkpoint (the export) and the others' 30 s grace after the chief, not TF 1.x's
    # 120 s start delay or 600 s throttle. The final checkpoint is at MAX_STEPS, or a step past
    # it: an async worker's last update may land after the chief's.
    final, step = final_checkpoint(model_dir)
    assert step >= MAX_STEPS, os.listdir(model_dir)
    ended_after = os.path.getmtime(tmp_path / "run" / "summary.txt") - os.path.getmtime(final + ".index")
    assert ended_after <= 60, f"the last task ended {ended_after:.0f}s after the final checkpoint\n{run.describe()}"
    return run, model_dir


def final_metrics(model_dir, run) -> dict:
    """The evaluator's last metrics, which the Estimator's rule puts at or past MAX_STEPS.

    Its evaluator ends after its first evaluation at or past max_steps; the chief's
    end-of-training save can follow it by a step in async training, unevaluated.
    """
    metrics = evaluated_steps(model_dir)
    last = max(metrics, default=None)
    assert last is not None and last >= MAX_STEPS, (final_checkpoint(model_dir), metrics, run.describe())
    return metrics[last]


def test_canned_dnn_classifier_over_feature_columns(tmp_path):
    run, model_dir = run_cluster(tmp_path, "dnn")
    assert final_metrics(model_dir, run)["accuracy"] >= 0.9, run.describe()  # two separated blobs: 0.98 measured


def answers(export_dir: str) -> list:
    """Classes the exported model gives to the blobs' centres, through tf.compat.v1.saved_model.loader."""
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], export_dir)
        signature = meta.signature_def["predict"]
        feed = {signature.inputs[name].name: np.array([-1.0, 1.0], np.float32) for name in "abcd"}
        return session.run(signature.outputs["class"].name, feed).tolist()


@pytest.mark.parametrize("spelling", ["tf1", "compat_v1"])
def test_custom_model_fn_with_sync_replicas_and_export(tmp_path, spelling):
    # compat_v1: TensorFlow's own SyncReplicasOptimizer class, found through its session hook.
    run, model_dir = run_cluster(tmp_path, "custom", *(["--compat_v1"] if spelling == "compat_v1" else []))
    assert final_metrics(model_dir, run)["accuracy"] >= 0.9, run.describe()
    chief = [json.loads(line) for line in run.logs["chief-0"].splitlines() if line.startswith('{"task"')]
    assert chief and "export" in chief[-1], run.describe()
    assert answers(chief[-1]["export"]) == [0, 1]
    assert "Traceback" not in run.logs["worker-0"] + run.logs["chief-0"], run.describe()
