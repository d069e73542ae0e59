"""The CNN trains with its README's launch_local.py command (fewer steps) and classifies the test digits."""

import os

import pytest

from tests.taskrun import REPO, python_command, run_tasks

LAUNCHER = os.path.join(REPO, "scripts", "launch_local.py")
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.slow
def test_digits_cnn_trains(tmp_path):
    flags = ["--model_fn=digits_cnn:model_fn", "--input_fn=digits_cnn:input_fn"]
    flags += ["--eval_input_fn=digits_cnn:eval_input_fn", "--optimizer=adam", "--train_steps=300", "--batch_size=64"]
    command = python_command(LAUNCHER, f"--log_dir={tmp_path / 'run'}", "--quiet", "--nochart", *flags)
    outcome = run_tasks({"launcher": command}, timeout=300, env={"PYTHONPATH": HERE})["launcher"]
    assert outcome.returncode == 0, outcome.describe()
    accuracy = float(outcome.stdout.split("eval accuracy ")[1].split(",")[0])
    assert accuracy > 0.9, outcome.stdout
