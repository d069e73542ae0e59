"""mnist_train_and_evaluate.py: every TF_CONFIG role ends by itself, the evaluator scores a checkpoint at max_steps."""

import json
import os
import re

import pytest

from ps_toolkit.launch.ports import reserve_ports
from tests.fixtures_legacy.eval_summaries import evaluated_steps, final_checkpoint
from tests.fixtures_legacy.launch import launch, legacy
from tests.fixtures_legacy.missing_data import assert_missing_data_dir_is_one_line

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mnist_train_and_evaluate.py")


@pytest.mark.slow
def test_train_and_evaluate_with_tf_config_roles(tmp_path):
    model_dir = tmp_path / "model"
    launcher = ["--chief", "--num_workers=1", "--num_ps=1", "--evaluator", "--grace_secs=30", "--ps_grace_secs=30"]
    run = launch(tmp_path / "run", launcher, legacy(SCRIPT, f"--model_dir={model_dir}", "--max_steps=400"))
    assert run.returncode == 0, run.describe()
    summary = (tmp_path / "run" / "summary.txt").read_text()
    for task in ("ps:0", "chief:0", "worker:0", "evaluator:0"):
        assert re.search(rf"^{task}\s+\S+\s+0 \(finished\)", summary, re.M), summary + run.describe()
    _, final_step = final_checkpoint(model_dir)
    metrics = evaluated_steps(model_dir)
    # The Estimator's evaluator ends after its first evaluation of a checkpoint at or past
    # max_steps. In async training the chief's end-of-training save can follow that one, a
    # step or two later (the other worker stepped after it), and is then not evaluated.
    last_evaluated = max(metrics, default=None)
    assert final_step >= 400 and last_evaluated is not None and last_evaluated >= 400, (
        final_step,
        metrics,
        run.describe(),
    )
    assert metrics[last_evaluated]["accuracy"] >= 0.85, metrics  # 0.95-0.97 measured on the 300 test digits


def test_a_missing_data_dir_is_one_line(tmp_path):
    # An Estimator task: its cluster comes from TF_CONFIG.
    with reserve_ports(2) as reservation:
        chief, ps = (f"localhost:{port}" for port in reservation.ports)
    cluster = {"chief": [chief], "ps": [ps]}
    env = {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "chief", "index": 0}})}
    assert_missing_data_dir_is_one_line(SCRIPT, tmp_path, f"--model_dir={tmp_path}/m", env=env)
