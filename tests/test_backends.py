"""Launch backends (backends.registry): a backend registered as a user's function is what the launcher runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ps_toolkit.backends import registry
from ps_toolkit.backends.local import LaunchOptions, RunResult
from ps_toolkit.base.errors import ConfigError
from ps_toolkit.launch.task_plan import Topology

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCHER = os.path.join(ROOT, "scripts", "launch_local.py")
# The launcher imports TensorFlow's flag modules on a busy machine: generous, and only a bound.
BOUND_SECS = 120

_USER_BACKEND = '''
import json, os, sys


def launch(options, settings):
    """Records what the launcher handed over instead of running anything."""
    record = {
        "settings": settings,
        "num_ps": options.topology.num_ps,
        "num_workers": options.topology.num_workers,
        "argv_of_first_task": options.command or None,
        "start_method": options.start_method,
    }
    with open(os.environ["BACKEND_RECORD"], "w") as f:
        json.dump(record, f)
    return 7
'''


@pytest.fixture
def clean_registry(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTERED", {})


def test_a_registered_function_is_the_backend_run_by_name(clean_registry):
    calls = []

    def mine(options, settings):
        calls.append((options, settings))
        return RunResult(0, "mine ran", "/nowhere", (), {})

    registry.register_backend("mine", mine)
    options = LaunchOptions(Topology(), command=("true",))
    result = registry.run("mine", options, {"zone": "a"})
    assert result.message == "mine ran" and calls == [(options, {"zone": "a"})]
    assert "mine" in registry.names() and {"local", "ray", "spark", "slurm", "kubernetes"} <= set(registry.names())


def test_an_unknown_backend_is_a_config_error_naming_it_and_the_known_ones(clean_registry):
    with pytest.raises(ConfigError, match=r"--backend='nowhere': no such launch backend; known: kubernetes, local"):
        registry.backend("nowhere", "--backend")


def test_a_taken_name_is_refused_unless_replaced(clean_registry):
    registry.register_backend("mine", lambda options, settings: 0)
    with pytest.raises(ValueError, match="already registered"):
        registry.register_backend("mine", lambda options, settings: 1)
    with pytest.raises(ValueError, match="already registered"):
        registry.register_backend("local", lambda options, settings: 1)
    registry.register_backend("mine", lambda options, settings: 2, replace=True)
    assert registry.run("mine") == 2
    with pytest.raises(ValueError, match="not callable"):
        registry.register_backend("other", "not a function")


def test_the_built_in_file_backends_write_the_job_files():
    script = registry.run(
        "slurm",
        None,
        {"python": "python3", "run_task": "run_task.py", "roles": [("ps", 1), ("worker", 2)], "task_args": []},
    )
    assert script.startswith("#!") and "srun" in script


def test_launch_local_runs_the_users_backend_given_as_module_function(tmp_path):
    (tmp_path / "my_backend.py").write_text(_USER_BACKEND)
    record = tmp_path / "record.json"
    env = dict(os.environ, BACKEND_RECORD=str(record), PYTHONPATH=str(tmp_path))
    args = ["--backend=my_backend:launch", "--num_ps=2", "--num_workers=3", "--isolation=none", "--nochart"]
    done = subprocess.run(
        [sys.executable, LAUNCHER, *args, f"--log_dir={tmp_path / 'run'}", "--allow_open_ports", "--", "true"],
        capture_output=True,
        text=True,
        timeout=BOUND_SECS,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 7, done
    assert json.loads(record.read_text()) == {
        "settings": None,
        "num_ps": 2,
        "num_workers": 3,
        "argv_of_first_task": ["true"],
        "start_method": "fork",
    }


def test_launch_local_refuses_an_unknown_backend_in_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, LAUNCHER, "--backend=nowhere", f"--log_dir={tmp_path / 'run'}"],
        capture_output=True,
        text=True,
        timeout=BOUND_SECS,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done
    assert done.stderr.strip().splitlines() == [
        "launch_local.py: --backend='nowhere': no such launch backend; "
        "known: kubernetes, local, ray, slurm, spark, volcano"
    ], done.stderr


def test_a_built_in_backend_that_needs_settings_is_refused_without_them_naming_its_command():
    needs = r"--backend='ray': that backend needs settings of its own; run ps-launch-ray"
    with pytest.raises(ConfigError, match=needs):
        registry.usable("ray", None, "--backend")
    with pytest.raises(ConfigError, match="run ps-make-tfjob"):
        registry.run("kubernetes")
