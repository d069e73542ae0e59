"""benchmarks/tfra_env.py: finding a made real-TFRA environment, and one line where one cannot be made."""

import json
import os
import subprocess
import sys

from benchmarks import tfra_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _fake_made_env(root, name):
    folder = os.path.join(root, name)
    os.makedirs(os.path.join(folder, "bin"))
    os.symlink(sys.executable, os.path.join(folder, "bin", "python"))
    with open(os.path.join(folder, tfra_env._MARKER), "w") as marker:
        json.dump({"requirements": tfra_env.ENVS[name].requirements()}, marker)
    return folder


def test_a_made_environment_is_found_without_pip(tmp_path):
    folder = _fake_made_env(str(tmp_path), "tf2.15-tfra0.7")
    python, reason = tfra_env.ensure_env("tf2.15-tfra0.7", str(tmp_path))
    assert python == os.path.join(folder, "bin", "python")
    assert "is made" in reason


def test_an_environment_made_with_other_pins_is_not_taken_as_made(tmp_path, monkeypatch):
    _fake_made_env(str(tmp_path), "tf2.15-tfra0.7")
    other = tfra_env.EnvSpec(tensorflow="2.15.0", tfra="0.7.2", pythons=("no-such-python3.99",))
    monkeypatch.setitem(tfra_env.ENVS, "tf2.15-tfra0.7", other)
    python, reason = tfra_env.ensure_env("tf2.15-tfra0.7", str(tmp_path))
    assert python is None
    assert reason == "cannot make tf2.15-tfra0.7: no interpreter for the wheels on PATH (looked for no-such-python3.99)"


def test_a_failed_making_leaves_no_environment(tmp_path, monkeypatch):
    # The interpreter is there, the pin is not on any index: pip fails, and the half-made folder goes.
    spec = tfra_env.EnvSpec(tensorflow="0.0.0.dev0", tfra="0.7.2", pythons=("python3.11",), extras=())
    monkeypatch.setitem(tfra_env.ENVS, "tf2.15-tfra0.7", spec)
    monkeypatch.setattr(tfra_env, "_base_python", lambda spec: sys.executable)
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # no network: the index is out of reach by choice
    python, reason = tfra_env.ensure_env("tf2.15-tfra0.7", str(tmp_path))
    assert python is None
    assert reason.startswith("cannot make tf2.15-tfra0.7: pip install exited 1: ")
    assert "\n" not in reason
    assert not os.path.exists(os.path.join(str(tmp_path), "tf2.15-tfra0.7"))


def test_the_command_line_names_an_unknown_environment_in_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "tfra_env.py"), "tf9-tfra9", "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stderr == "unknown TFRA environment 'tf9-tfra9'; known: tf2.15-tfra0.7, tf2.16-tfra0.8\n"
    assert proc.stdout == ""


def test_the_command_line_lists_the_environments(tmp_path):
    _fake_made_env(str(tmp_path), "tf2.16-tfra0.8")
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "tfra_env.py"), "--list", "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("tf2.15-tfra0.7: tensorflow==2.15.1 tensorflow-recommenders-addons==0.7.2")
    assert lines[0].endswith("(not made)")
    assert lines[1].endswith("(made)")
