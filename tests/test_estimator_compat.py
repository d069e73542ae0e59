"""tf.estimator under run_legacy.py: the supplied TF internals, every import form, and bad input in one line."""

import ast
import importlib
import json
import os
import sys
import time

import pytest
from fixtures_legacy.launch import RUN_LEGACY
from taskrun import run_script

from ps_toolkit.base.errors import EXIT_CONFIG, EXIT_RETRYABLE
from ps_toolkit.launch.ports import reserve_ports
from ps_toolkit_compat import estimator_support, removed

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures_legacy")


def run_legacy(*args, env=None, timeout=240):
    full = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    full.pop("TF_CONFIG", None)
    full.update(env or {})
    # Forked from the tests' fork server (tests/taskrun.py), which has TensorFlow imported already.
    return run_script([sys.executable, RUN_LEGACY, *args], timeout=timeout, env=full)


def explain(proc) -> str:
    return f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"


def _tf_python_uses(path):
    """(module, name) for each ``from tensorflow.python.X import Y`` and each ``Y.attr`` on such a module Y."""
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    aliases, uses = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tensorflow.python"):
            for name in node.names:
                uses.append((node.module, name.name))
                aliases[name.asname or name.name] = f"{node.module}.{name.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            uses.append((aliases[node.value.id], node.attr))
    return uses


def test_every_tf_internal_the_estimator_uses_is_there():
    assert estimator_support.problems() == []
    estimator_support.load()
    package = os.path.dirname(importlib.import_module(estimator_support.PACKAGE).__file__)
    tpu_only = {name for name in estimator_support.SUPPLIED if ".tpu." in name}
    missing = []
    for folder, _, files in os.walk(package):
        for name in files:
            if not name.endswith(".py") or name.endswith("_test.py") or "testing_utils" in name:
                continue
            path = os.path.join(folder, name)
            for module_name, attribute in _tf_python_uses(path):
                try:
                    module = importlib.import_module(module_name)
                except ImportError:
                    parent, _, child = module_name.rpartition(".")
                    if not hasattr(importlib.import_module(parent), child):
                        missing.append(f"{module_name} (imported by {os.path.relpath(path, package)})")
                    continue  # a class imported by name: its attributes are not modules' to check
                if module_name in tpu_only or hasattr(module, attribute):
                    continue
                try:
                    importlib.import_module(f"{module_name}.{attribute}")
                except ImportError:
                    missing.append(f"{module_name}.{attribute} (used by {os.path.relpath(path, package)})")
    assert not missing, (
        "TensorFlow lacks these internals that tensorflow-estimator uses and compat/estimator_support.py does not "
        "supply: " + "; ".join(sorted(set(missing)))
    )


def test_supplied_internals_say_what_they_are():
    estimator_support.load()
    from tensorflow.python.distribute import estimator_training
    from tensorflow.python.tpu import tpu_embedding
    from tensorflow.python.util import tf_export

    assert estimator_training.should_run_distribute_coordinator(object()) is False
    assert tf_export.API_ATTRS[tf_export.ESTIMATOR_API_NAME].names == "_estimator_api_names"
    with pytest.raises(estimator_support.TpuRemovedError, match="TPUEstimator"):
        tpu_embedding.AdagradParameters(0.1)
    assert not hasattr(tpu_embedding, "TPUEmbedding")


def test_tf_estimator_is_no_longer_refused():
    assert "estimator" not in removed.REPLACEMENTS
    assert "tf.estimator" in removed.message("contrib.learn")


def test_every_estimator_form_trains_evaluates_and_exports():
    proc = run_legacy(os.path.join(FIXTURES, "estimator_forms.py"))
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report == {
        "tf1_canned": None,
        "tf1_custom_and_export": None,
        "compat_v1_module": None,
        "compat_v1_attribute": None,
        "v2_canned_keras_optimizer": None,
    }, explain(proc)
    assert proc.returncode == 0, explain(proc)


def _one_line_error(proc, script: str) -> str:
    lines = proc.stderr.strip().splitlines()
    assert lines and lines[-1].startswith(f"{script}: error: "), explain(proc)
    assert "Traceback" not in proc.stderr, explain(proc)
    return lines[-1]


def test_input_fn_of_the_wrong_structure_is_one_line():
    proc = run_legacy(os.path.join(FIXTURES, "estimator_bad_input.py"), "three")
    assert proc.returncode == EXIT_CONFIG, explain(proc)
    line = _one_line_error(proc, "estimator_bad_input.py")
    assert "input_fn returned a tuple of 3 items" in line, line


def test_what_the_estimator_takes_from_an_input_fn_is_taken():
    """Never stricter than the original: numpy arrays, lists, numbers, nested tuples, int and str keys."""
    proc = run_legacy(os.path.join(FIXTURES, "estimator_numpy_input.py"), timeout=120)
    assert proc.returncode == 0, explain(proc)
    assert "numpy regressor step 5" in proc.stdout, explain(proc)
    assert "mixed keys and nested labels step 3" in proc.stdout, explain(proc)


def test_a_bad_tf_config_is_the_value_error_the_estimator_raised():
    env = {"TF_CONFIG": json.dumps({"cluster": {"chief": ["host0:0"]}, "task": {"type": "worker", "index": 0}})}
    proc = run_legacy(os.path.join(FIXTURES, "estimator_bad_input.py"), "caught", env=env)
    assert proc.returncode == 0, explain(proc)
    assert "caught ValueError: TF_CONFIG: worker is not a valid task_type in the cluster_spec" in proc.stdout


def test_distribute_coordinator_is_one_line():
    tf_config = {"cluster": {"chief": ["localhost:1"], "ps": ["localhost:2"]}, "task": {"type": "chief", "index": 0}}
    proc = run_legacy(
        os.path.join(FIXTURES, "estimator_bad_input.py"), "coordinator", env={"TF_CONFIG": json.dumps(tf_config)}
    )
    assert proc.returncode == EXIT_CONFIG, explain(proc)
    assert "distribute coordinator" in _one_line_error(proc, "estimator_bad_input.py")


@pytest.mark.parametrize(
    ("tf_config", "expected"),
    [
        ({"cluster": {"chief": ["localhost:1"], "ps": ["localhost:2"]}}, "task type must be set"),
        ('{"cluster": ', "TF_CONFIG is not valid JSON"),
        (
            {"cluster": {"chief": ["localhost:1"]}, "task": {"type": "worker", "index": 3}},
            "TF_CONFIG: worker is not a valid task_type in the cluster_spec",
        ),
    ],
)
def test_unusable_tf_config_is_one_line(tmp_path, tf_config, expected):
    text = tf_config if isinstance(tf_config, str) else json.dumps(tf_config)
    script = os.path.join(FIXTURES, "estimator_cluster.py")
    proc = run_legacy(script, f"--model_dir={tmp_path}", env={"TF_CONFIG": text}, timeout=120)
    assert proc.returncode == EXIT_CONFIG, explain(proc)
    assert expected in _one_line_error(proc, "estimator_cluster.py")


def test_evaluator_without_any_checkpoint_gives_up_in_bounded_time(tmp_path):
    reservation = reserve_ports(2)  # held, so nothing answers at the chief's address
    try:
        chief, ps = (f"localhost:{port}" for port in reservation.ports)
        tf_config = {"cluster": {"chief": [chief], "ps": [ps]}, "task": {"type": "evaluator", "index": 0}}
        started = time.monotonic()
        proc = run_legacy(
            os.path.join(FIXTURES, "estimator_cluster.py"),
            f"--model_dir={tmp_path}",
            env={"TF_CONFIG": json.dumps(tf_config), "PS_TOOLKIT_EVALUATOR_ORPHAN_SECS": "3"},
            timeout=120,
        )
        elapsed = time.monotonic() - started
    finally:
        reservation.release()
    assert proc.returncode == EXIT_RETRYABLE, explain(proc)
    line = _one_line_error(proc, "estimator_cluster.py")
    assert "none was ever written" in line and chief in line, line
    assert elapsed < 60, f"the evaluator took {elapsed:.0f}s to give up (bound 3s + start-up)"


def test_without_the_package_only_tf_estimator_fails_in_one_line():
    from ps_toolkit_compat import legacy_tf

    reason = "the tensorflow_estimator package is not installed (pip install tensorflow-estimator==2.15.0)"
    legacy, submodules = legacy_tf.build(estimator_support.UnavailableApi(reason))
    assert submodules["tensorflow.estimator"] is legacy.estimator
    assert not hasattr(legacy.estimator, "Estimator")
    with pytest.raises(
        estimator_support.EstimatorUnavailableError, match=r"tf\.estimator\.RunConfig is unavailable: the"
    ):
        legacy.estimator.RunConfig  # noqa: B018 -- the attribute access is what fails
    assert legacy.train.Server is not None  # the rest of the legacy surface is there


def test_the_estimators_session_stand_in_yields_to_a_patch_of_tensorflows(monkeypatch):
    """Never stricter: a test or script that patches training.MonitoredTrainingSession gets its patch called,
    as the estimator called it without the compat layer (estimator_test.py's hook tests mock it)."""
    import types

    from ps_toolkit_compat import estimator_roles

    def original():
        return "original"

    def stand_in():
        return "stand-in"

    def patched():
        return "patched"

    base = types.ModuleType("training")
    base.MonitoredTrainingSession, base.Scaffold = original, object
    module = estimator_roles._DelegatingModule(base, {"MonitoredTrainingSession": stand_in})
    assert module.MonitoredTrainingSession is stand_in and module.Scaffold is object
    monkeypatch.setattr(base, "MonitoredTrainingSession", patched)
    assert module.MonitoredTrainingSession is patched
    monkeypatch.undo()
    assert module.MonitoredTrainingSession is stand_in
