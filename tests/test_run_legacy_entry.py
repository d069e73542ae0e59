"""run_legacy.py's ways in: ``-m package.module``, scripts with their own argument parsing, find_spec."""

import json
import os
import sys

import pytest
from fixtures_legacy.launch import LAUNCH_LOCAL, RUN_LEGACY
from taskrun import run_script

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures_legacy")
APPENDED = ["--chief_hosts=localhost:2", "--worker_hosts=localhost:3", "--job_name=worker", "--task_index=0"]
CLUSTER = {"chief": ["localhost:2"], "worker": ["localhost:3"]}
TF_CONFIG = json.dumps({"cluster": CLUSTER, "task": {"type": "worker", "index": 0}})


def run_legacy(args, *, cwd=None, appended=(), timeout=90):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TF_CONFIG=TF_CONFIG)
    env["PS_TOOLKIT_CLUSTER_ARGS"] = json.dumps(list(appended))
    return run_script([sys.executable, RUN_LEGACY, *args, *appended], timeout=timeout, env=env, cwd=cwd)


def explain(proc) -> str:
    return f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"


def test_a_trainer_package_runs_as_python_m_would_with_the_launchers_flags_appended():
    proc = run_legacy(
        ["-m", "trainer.task", "--job-dir=/tmp/jd"], cwd=os.path.join(FIXTURES, "trainer_pkg"), appended=APPENDED
    )
    assert proc.returncode == 0, explain(proc)
    assert "job_dir=/tmp/jd w=1.5 task={'type': 'worker', 'index': 0} spec=tensorflow" in proc.stdout, explain(proc)


def test_a_module_that_is_not_there_is_one_line_and_status_2(tmp_path):
    proc = run_legacy(["-m", "trainer.nope"], cwd=str(tmp_path))
    assert proc.returncode == 2, explain(proc)
    assert proc.stderr.strip().splitlines()[-1].startswith("run_legacy.py: error: no module named 'trainer.nope'")


@pytest.mark.parametrize(
    "module, expected",
    [
        (".relative", "no module named '.relative'"),
        ("just_a_package", "'just_a_package' is a package with no __main__ module, so it cannot be run"),
    ],
)
def test_a_module_python_m_could_not_run_either_is_one_line_and_status_2(tmp_path, module, expected):
    (tmp_path / "just_a_package").mkdir()
    (tmp_path / "just_a_package" / "__init__.py").write_text("")
    proc = run_legacy(["-m", module], cwd=str(tmp_path))
    assert proc.returncode == 2, explain(proc)
    assert "Traceback" not in proc.stderr, explain(proc)
    assert proc.stderr.strip().splitlines()[-1] == f"run_legacy.py: error: {expected}" + (
        f" (from {tmp_path} and the Python path)" if module.startswith(".") else " (python -m says the same)"
    ), explain(proc)


@pytest.mark.parametrize(
    ("extra", "code", "expected"),
    [
        ([], 0, "worker:0 local_steps=3"),
        (["--bogus=1"], 1, "Unknown command line flag 'bogus'"),  # what absl says without the launcher
    ],
)
def test_an_absl_script_without_cluster_flags_takes_the_appended_ones(extra, code, expected):
    proc = run_legacy([os.path.join(FIXTURES, "absl_tf_config.py"), "--train_steps=3", *extra], appended=APPENDED)
    assert proc.returncode == code, explain(proc)
    assert expected in proc.stdout + proc.stderr, explain(proc)


def test_an_argparse_script_still_refuses_what_the_launcher_did_not_append():
    args = ["-m", "trainer.task", "--job-dir=/tmp/jd", "--bogus"]
    proc = run_legacy(args, cwd=os.path.join(FIXTURES, "trainer_pkg"), appended=APPENDED)
    assert proc.returncode == 2, explain(proc)
    assert "error: unrecognized arguments: --bogus" in proc.stderr, explain(proc)
    assert "--chief_hosts" not in proc.stderr, explain(proc)


@pytest.mark.slow
def test_the_launcher_runs_an_absl_tf_config_script_as_the_readme_writes_it(tmp_path):
    command = [sys.executable, LAUNCH_LOCAL, f"--log_dir={tmp_path / 'run'}", "--chief", "--num_workers=1"]
    command += ["--num_ps=0", "--nochart", "--grace_secs=30", "--", "python", RUN_LEGACY]
    command += [os.path.join(FIXTURES, "absl_tf_config.py"), "--train_steps=4"]
    proc = run_script(command, timeout=120)
    assert proc.returncode == 0, explain(proc)
    assert "[chief:0] chief:0 local_steps=4" in proc.stdout and "launcher: succeeded" in proc.stdout, explain(proc)


def test_a_compat_v1_script_gets_the_same_starts_and_ends_and_the_mapped_internal_module():
    proc = run_legacy([os.path.join(FIXTURES, "compat_v1_probe.py")])
    assert proc.returncode == 0, explain(proc)
    compat = "ps_toolkit_compat.task_context " + " ".join(["ps_toolkit_compat.supervision"] * 3)
    assert f"classes {compat}" in proc.stdout and "values [0, 1, 2]" in proc.stdout, explain(proc)


def test_tensorflow_python_estimator_forwards_to_the_estimator_package_as_tf_1_14_to_2_15_did(tmp_path):
    script = tmp_path / "old_estimator_import.py"
    script.write_text(
        "from tensorflow.python.estimator.model_fn import ModeKeys as Modes\n"
        "import tensorflow.python.estimator.model_fn as aliased\n"
        "import tensorflow_estimator.python.estimator.model_fn as real\n"
        "print('modes', Modes.TRAIN, Modes.PREDICT, aliased is real)\n"
        "import tensorflow.python.estimator.no_such_module\n"
    )
    proc = run_legacy([str(script)])
    assert "modes train infer True" in proc.stdout, explain(proc)
    assert proc.returncode != 0 and "No module named 'tensorflow.python.estimator.no_such_module'" in proc.stderr, (
        explain(proc)
    )


def test_contrib_learns_mode_keys_are_the_estimators_values(tmp_path):
    script = tmp_path / "contrib_mode_keys.py"
    script.write_text(
        "import tensorflow as tf\n"
        "from tensorflow.contrib.learn.python.learn.estimators.model_fn import ModeKeys as Modes\n"
        "print('modes', Modes.TRAIN, Modes.EVAL, Modes.INFER == tf.estimator.ModeKeys.PREDICT)\n"
        "from tensorflow.contrib.learn.python.learn import learn_runner\n"
    )
    proc = run_legacy([str(script)])
    assert "modes train eval True" in proc.stdout, explain(proc)
    assert proc.returncode == 2 and "contrib.learn.python.learn.learn_runner was removed" in proc.stderr, explain(proc)
