"""No run is called a success by mistake: an input that ends early, an eval input that never ends, a model_fn
that raises (tests/fixtures/verdict_run.py trains each case in a process of its own)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ps_toolkit.base import progress_lines
from ps_toolkit.launch.task_output import ConsoleFilter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(ROOT, "tests", "fixtures", "verdict_run.py")
# Read so, the file also runs (and fails for its findings) against a toolkit from before the prefix.
LOG_ONLY_PREFIX = getattr(progress_lines, "LOG_ONLY_PREFIX", "ps_toolkit log only: ")

pytestmark = pytest.mark.timeout(300)


def run(case: str, tmp_path) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run(
        [sys.executable, RUN, case, str(tmp_path / "checkpoints")],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
        env=env,
    )


def error_lines(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("verdict_run.py: error: ")]


def test_a_training_input_that_ends_before_train_steps_is_exit_2_naming_the_step(tmp_path):
    done = run("short_input", tmp_path)
    errors = error_lines(done)
    assert done.returncode == 2 and len(errors) == 1, done.stdout[-2000:] + done.stderr[-3000:]
    said = "the input_fn's dataset ended after 8 steps of this replica, before --train_steps=40; repeat it"
    assert said in errors[0], errors


def test_an_endless_generator_eval_input_is_refused_after_the_watchdog_bound_not_retried(tmp_path):
    """Its batches are progress (the watchdog does not blame the ps with a retryable 200); the bound ends it."""
    done = run("endless_generator_eval", tmp_path)
    errors = error_lines(done)
    assert done.returncode == 2 and len(errors) == 1, done.stdout[-2000:] + done.stderr[-3000:]
    assert "the eval_input_fn's dataset did not end within 10 s" in errors[0], errors
    assert "give --eval_steps" in errors[0] and "watchdog:" not in done.stderr, errors


@pytest.mark.parametrize(
    "case, said",
    [
        ("model_fn_raises", "verdict_run:model_fn raised ValueError: the model_fn cannot handle this feature"),
        ("wrong_dtype", "verdict_run:model_fn raised "),
    ],
)
def test_a_model_fn_or_input_error_is_one_line_and_exit_2_with_the_traceback_in_the_log_only(case, said, tmp_path):
    done = run(case, tmp_path)
    errors = error_lines(done)
    assert done.returncode == 2 and len(errors) == 1, done.stdout[-2000:] + done.stderr[-3000:]
    assert errors[0].startswith(f"verdict_run.py: error: {said}"), errors
    assert errors[0].endswith("(the traceback is in this task's log)"), errors
    # The traceback is there, on lines the launcher's console does not show.
    kept = [line for line in done.stderr.splitlines() if line.startswith(LOG_ONLY_PREFIX)]
    assert kept and kept[0] == f"{LOG_ONLY_PREFIX}Traceback (most recent call last):", done.stderr[-3000:]
    shown = [line for line in done.stderr.splitlines() if ConsoleFilter().shows("log", line)]
    assert not [line for line in shown if "Traceback" in line], shown


def test_a_run_that_trains_every_step_still_succeeds(tmp_path):
    done = run("ok", tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["global_step"] == 40 and result["eval"]["loss"] > 0, result
