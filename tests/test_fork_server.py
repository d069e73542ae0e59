"""The fork server (ps_toolkit.process.fork_server, fork_child, fork_client): a forked task is what exec would start.

A server imports TensorFlow once (seconds), so the tests share one per module.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import psutil
import pytest

from ps_toolkit.launch import task_plan
from ps_toolkit.process import fork_starter
from ps_toolkit.process.fork_client import ForkServer, ForkUnavailable
from ps_toolkit.process.fork_starter import ForkStarter
from ps_toolkit.process.forked_process import ForkedProcess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = os.path.join(ROOT, "tests", "fixtures", "fork_probe.py")
RUN_TASK = os.path.join(ROOT, "scripts", "run_task.py")
RUN_LEGACY = os.path.join(ROOT, "scripts", "run_legacy.py")
KERAS_PROBE = os.path.join(ROOT, "tests", "fixtures", "keras_probe.py")
FAKE_TASK = os.path.join(ROOT, "tests", "fixtures", "fake_task.py")
LAUNCHER = os.path.join(ROOT, "scripts", "launch_local.py")
BOUND_SECS = 60

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def env():
    return task_plan.task_env({"TF_CPP_MIN_LOG_LEVEL": "2"})


@pytest.fixture(scope="module")
def server(env):
    started = ForkServer(env)
    yield started
    started.close()


def probe(server, env, *args, **kwargs):
    """Runs the probe forked; returns (exit code, what it reported, stderr)."""
    proc = server.spawn(
        [sys.executable, PROBE, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs
    )
    out, err = proc.stdout.read().decode(), proc.stderr.read().decode()
    proc.stdout.close()
    proc.stderr.close()
    code = proc.wait(timeout=BOUND_SECS)
    first = out.splitlines()[0] if out else "{}"
    return code, json.loads(first), err


def test_forked_task_sees_its_own_argv_env_cwd_session_and_stdin(server, env, tmp_path):
    code, seen, err = probe(server, dict(env, FORK_PROBE="yes"), "exit:3", "--x=1", cwd=str(tmp_path))
    assert code == 3, err
    assert seen["argv"] == [PROBE, "exit:3", "--x=1"] and seen["main"] == "__main__", seen
    assert seen["env"] == "yes" and seen["cwd"] == str(tmp_path), seen
    assert seen["path0"] == os.path.dirname(PROBE), seen
    assert seen["own_group"] and seen["own_session"] and seen["ppid"] == server.pid, seen
    assert seen["stdin"] == os.devnull and seen["threads"] == 1, seen
    assert seen["net_ns"] == os.readlink("/proc/self/ns/net"), seen
    assert seen["name"] == "fork_probe.py", seen


def test_a_tasks_pythonpath_gives_it_the_sys_path_exec_would(server, env, tmp_path):
    """A folder added by the task's PYTHONPATH (relative to its working folder, as python reads it) is where
    python puts it: the forked task's sys.path is the exec'd one's."""
    (tmp_path / "user_model").mkdir()
    (tmp_path / "user_model" / "my_model.py").write_text("")
    # A repeated folder and an empty entry (the working folder), as python reads them.
    task_env = dict(env, PYTHONPATH=os.pathsep.join(["user_model", "user_model", "", str(tmp_path / "other")]))
    code, seen, err = probe(server, task_env, "exit:0", cwd=str(tmp_path))
    assert code == 0, err
    done = subprocess.run(
        [sys.executable, PROBE, "exit:0"], env=task_env, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert seen["path"] == json.loads(done.stdout)["path"], (seen["path"], done.stdout)
    assert seen["path"][1:4] == [str(tmp_path / "user_model"), str(tmp_path), str(tmp_path / "other")], seen["path"]


def test_a_pythonpath_folder_that_shadows_an_imported_module_is_refused(server, env, tmp_path):
    """exec would import the folder's numpy, not the server's: the task is refused, and a ForkStarter execs it."""
    (tmp_path / "numpy.py").write_text("raise SystemExit('the shadowing numpy')")
    with pytest.raises(ForkUnavailable, match=f"PYTHONPATH folder {tmp_path} holds numpy.py, a module the fork"):
        server.spawn([sys.executable, PROBE], env=dict(env, PYTHONPATH=str(tmp_path)))


def test_a_forked_task_takes_its_temp_folder_from_its_own_environment(env, tmp_path):
    """tempfile reads TMPDIR once and caches it: a server's cached folder must not outlive the task's TMPDIR."""
    cached = ForkServer(env, preload=["tests.fixtures.cache_tempdir"])
    try:
        code, seen, err = probe(cached, dict(env, TMPDIR=str(tmp_path)), "exit:0")
    finally:
        cached.close()
    assert code == 0, err
    assert seen["tmp"] == str(tmp_path), seen


@pytest.mark.parametrize(
    "mode, status, stderr_has",
    [("exit:0", 0, ""), ("raise", 1, "RuntimeError: the probe raised"), ("message", 1, "the probe's message")],
)
def test_exit_status_is_what_python_returns(server, env, mode, status, stderr_has):
    code, _, err = probe(server, env, mode)
    assert code == status and stderr_has in err, err


def test_a_signal_is_reported_as_popen_does(server, env):
    proc = server.spawn([sys.executable, PROBE, "sleep"], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    proc.stdout.readline()  # started
    assert proc.poll() is None
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=BOUND_SECS) == -signal.SIGTERM
    proc.stdout.close()
    with pytest.raises(subprocess.TimeoutExpired):
        sleeper = server.spawn([sys.executable, PROBE, "sleep"], env=env, stdout=subprocess.DEVNULL)
        try:
            sleeper.wait(timeout=0.2)
        finally:
            sleeper.kill()
            sleeper.wait(timeout=BOUND_SECS)


def test_closing_a_server_kills_its_tasks(env):
    own = ForkServer(env)
    try:
        sleeper = own.spawn([sys.executable, PROBE, "sleep"], env=env, stdout=subprocess.PIPE)
        sleeper.stdout.readline()
    finally:
        own.close()
    assert sleeper.wait(timeout=BOUND_SECS) == -signal.SIGKILL
    assert not psutil.pid_exists(own.pid) or psutil.Process(own.pid).status() == psutil.STATUS_ZOMBIE


def test_guard_refuses_a_server_whose_tensorflow_runtime_started_and_tasks_fall_back_to_exec(env):
    preload = ["tests.fixtures.start_tf_runtime"]
    refused = ForkServer(env, preload)
    try:
        with pytest.raises(ForkUnavailable, match="TensorFlow's runtime has already started"):
            refused.wait_ready()
    finally:
        refused.close()
    lines = []
    starter = ForkStarter(note=lines.append, preload=preload)
    proc = starter.start(
        [sys.executable, RUN_LEGACY, PROBE, "exit:0"], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        assert not isinstance(proc, ForkedProcess)
        assert proc.wait(timeout=BOUND_SECS) == 0
        assert json.loads(proc.stdout.readline())["argv"] == [PROBE, "exit:0"]
    finally:
        proc.stdout.close()
        fork_starter.close_shared()
    # Besides the line said while a server imports (once per process, so here or in an earlier test).
    refusals = [line for line in lines if not line.startswith("fork server: importing TensorFlow")]
    assert len(refusals) == 1 and "starting the toolkit's tasks with exec instead" in refusals[0], lines


def test_only_the_toolkits_task_scripts_are_forked(tmp_path):
    assert fork_starter.forkable([sys.executable, RUN_TASK, "--job_name=ps"], {})
    assert fork_starter.forkable([sys.executable, RUN_LEGACY, "old.py"], {})
    assert not fork_starter.forkable([sys.executable, PROBE], {})
    assert not fork_starter.forkable(["/usr/bin/env", "python3", RUN_TASK], {})
    # A bare "python", as the README writes the commands, is this interpreter when the task's PATH says so.
    (tmp_path / "python").symlink_to(sys.executable)
    assert fork_starter.forkable(["python", RUN_LEGACY, "old.py"], {"PATH": str(tmp_path)})
    assert not fork_starter.forkable(["python", RUN_LEGACY, "old.py"], {"PATH": str(tmp_path / "nowhere")})
    # A legacy script needs the legacy Keras at import; with the modern one chosen it gets a fresh process.
    assert not fork_starter.forkable([sys.executable, RUN_LEGACY, "old.py"], {"TF_USE_LEGACY_KERAS": "0"})


def test_python_dash_m_runs_a_module_as_main(server, env, tmp_path):
    (tmp_path / "data.json").write_text('{"b": 1}')
    proc = server.spawn(
        [sys.executable, "-m", "json.tool", "data.json"], env=env, stdout=subprocess.PIPE, cwd=str(tmp_path)
    )
    assert json.loads(proc.stdout.read()) == {"b": 1}
    proc.stdout.close()
    assert proc.wait(timeout=BOUND_SECS) == 0


def test_the_server_imports_tensorflow_without_keras_3_as_run_task_does(server, env):
    keras = server.spawn([sys.executable, KERAS_PROBE], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert keras.stdout.read().decode().strip() == "lean"
    keras.stdout.close()
    assert keras.wait(timeout=BOUND_SECS) == 0
