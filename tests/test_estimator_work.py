"""An estimator job that trains nothing but does its job, and tf.estimator's refusal of a call in the wrong role.

tests/fixtures_legacy/estimator_work.py trains a model, then serves it (restore, export, predict: the
shape of TFRA's estimator demo in its serving mode), or calls Estimator.train() on a ps.
"""

import json
import os
import sys

import pytest
from fixtures_legacy.launch import RUN_LEGACY, launch, legacy
from taskrun import run_script

from ps_toolkit.base.errors import EXIT_CONFIG
from ps_toolkit.base.progress_lines import CLUSTER_ARGS_ENV, PROGRESS_PREFIX

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures_legacy", "estimator_work.py")


def run_legacy(*args, env=None):
    full = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    full.pop("TF_CONFIG", None)
    full.pop(CLUSTER_ARGS_ENV, None)
    full.update(env or {})
    return run_script([sys.executable, RUN_LEGACY, SCRIPT, *args], timeout=240, env=full)


def explain(proc) -> str:
    return f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"


def trained_model(tmp_path) -> str:
    model_dir = str(tmp_path / "model")
    done = run_legacy("--mode=train", f"--model_dir={model_dir}")
    assert done.returncode == 0, explain(done)
    return model_dir


def test_export_and_predict_print_work_records_under_a_launcher_and_nothing_by_hand(tmp_path):
    model_dir = trained_model(tmp_path)
    serve = ["--mode=serve", f"--model_dir={model_dir}", f"--export_dir={tmp_path / 'export'}"]
    by_hand = run_legacy(*serve)
    assert by_hand.returncode == 0 and PROGRESS_PREFIX not in by_hand.stdout, explain(by_hand)
    launched = run_legacy(*serve, env={CLUSTER_ARGS_ENV: "--job_name=chief"})
    assert launched.returncode == 0, explain(launched)
    lines = [line for line in launched.stdout.splitlines() if line.startswith(PROGRESS_PREFIX)]
    records = [r for r in (json.loads(line[len(PROGRESS_PREFIX) :]) for line in lines) if "work" in r]
    exported, predicted = records
    checkpoint = os.path.join(model_dir, "model.ckpt-5")
    assert exported["work"] == "exported" and exported["checkpoint"] == checkpoint, records
    assert os.path.isfile(os.path.join(exported["path"], "saved_model.pb")), records
    assert predicted == {**predicted, "work": "predicted", "checkpoint": checkpoint, "count": 6}, records


def test_estimator_train_on_a_ps_is_one_line_naming_the_task_and_the_call_exit_2(tmp_path):
    cluster = {"ps": ["localhost:1"], "chief": ["localhost:2"]}
    tf_config = json.dumps({"cluster": cluster, "task": {"type": "ps", "index": 0}})
    done = run_legacy("--mode=train_here", f"--model_dir={tmp_path / 'm'}", env={"TF_CONFIG": tf_config})
    assert done.returncode == EXIT_CONFIG, explain(done)
    errors = [line for line in done.stderr.splitlines() if ": error: " in line]
    assert errors == [
        "estimator_work.py: error: ps:0: tf.estimator.Estimator.train(): Train has been called wrong "
        "configuration. Please use tf.estimator.train_and_evaluate which calls proper API according to given "
        "configuration."
    ], explain(done)
    assert "Traceback" not in done.stderr, explain(done)


@pytest.mark.slow
def test_an_export_only_estimator_job_succeeds_under_the_launcher_saying_it_counted_no_step(tmp_path):
    model_dir = trained_model(tmp_path)
    serve = ["--mode=serve", f"--model_dir={model_dir}", f"--export_dir={tmp_path / 'export'}"]
    run = launch(tmp_path / "run", ["--num_ps=1", "--num_workers=1", "--chief"], legacy(SCRIPT, *serve))
    assert run.returncode == 0, run.describe()
    said = (
        "launcher: succeeded: the chief (chief:0) finished with status 0 (no training step the launcher could count; "
    )
    said += "its work: restored "
    assert said + os.path.join(model_dir, "model.ckpt-5") + " and exported " in run.output, run.describe()
    assert "and predicted 6 examples (chief:0))" in run.output, run.describe()
