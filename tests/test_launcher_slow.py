"""Slow tests of the launcher and LocalCluster with real TensorFlow task processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psutil
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCHER = os.path.join(ROOT, "scripts", "launch_local.py")
TEXTBOOK = os.path.join(ROOT, "tests", "fixtures", "textbook_ps_join.py")
BOUND_SECS = 400

pytestmark = pytest.mark.slow


def launch(args, tmp_path, timeout=BOUND_SECS):
    argv = [sys.executable, LAUNCHER, f"--log_dir={tmp_path / 'run'}", "--nochart", *args]
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"command: {' '.join(argv)}\ntimed out after {timeout}s\n{err.stdout}\n{err.stderr}")
    context = f"command: {' '.join(argv)}\nexit code: {done.returncode}\noutput:\n{done.stdout}\n{done.stderr}"
    # A task the session's host fork server has not reaped yet is a zombie: gone, not running.
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before and _running(p)]
    assert not left, f"processes left running: {left}\n{context}"
    return done.returncode, done.stdout + done.stderr, context


def _running(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def chief_result(tmp_path, name="worker-0"):
    lines = (tmp_path / "run" / f"{name}.log").read_text().splitlines()
    return json.loads(next(line for line in reversed(lines) if line.startswith("{")))


def test_default_run_trains_to_90_percent_and_leaves_nothing_running(tmp_path):
    code, output, context = launch(["--quiet", "--chart"], tmp_path)
    assert code == 0, context
    assert chief_result(tmp_path)["test_accuracy"] >= 0.9, context
    assert (tmp_path / "run" / "progress.png").exists(), context
    assert os.listdir(tmp_path / "run" / "checkpoints"), "checkpoints go into the run folder"
    # Every task reported the toolkit's result (the ps its replicas_done): no "last lines" of scripts of their own.
    assert "last lines:" not in output, context


def test_sync_run_with_more_tasks(tmp_path):
    args = ["--quiet", "--num_ps=2", "--num_workers=3", "--sync_replicas", "--train_steps=300"]
    code, output, context = launch(args, tmp_path)
    assert code == 0, context
    assert chief_result(tmp_path)["global_step"] >= 300, context


def test_textbook_script_whose_ps_joins_forever_ends_cleanly(tmp_path):
    # One worker: a textbook non-chief waits out MonitoredTrainingSession's 30 s readiness poll, which is not
    # what this test is about.
    args = ["--num_workers=1", "--grace_secs=30", "--ps_grace_secs=1", "--", sys.executable, TEXTBOOK, "--steps=100"]
    code, output, context = launch(args, tmp_path)
    assert code == 0, context
    assert "SIGTERM (stopped)" in (tmp_path / "run" / "summary.txt").read_text(), context


def test_killed_ps_is_restarted_and_training_completes(tmp_path):
    # The drill is timed from launch: the run is made long enough (one step per
    # run, 2000 steps: about 8 s here) that the kill always lands before training
    # ends, even on a fast machine, and usually after the first steps (a forked
    # task's first run is about 1.2 s after its fork); a kill during start-up is a
    # valid drill too.
    args = ["--quiet", "--restart=on-failure", "--kill=ps:0@2s", "--train_steps=2000", "--save_checkpoint_steps=200"]
    code, output, context = launch(args + ["--steps_per_run=1"], tmp_path)
    assert code == 0, context
    assert "ps:0 was killed by SIGKILL (--kill drill); restarting" in output, context
    assert chief_result(tmp_path)["global_step"] >= 2000, context


def test_local_cluster_runs_run_task_to_the_end(local_cluster):
    cluster = local_cluster(num_ps=1, num_workers=2, train_args=["--train_steps=200"])
    assert cluster.wait(["worker"], timeout_secs=BOUND_SECS) == {"worker:0": 0, "worker:1": 0}
    assert cluster.wait(["ps"], timeout_secs=60) == {"ps:0": 0}


def test_a_run_past_its_timeout_says_where_each_task_waits(tmp_path):
    # Tasks forked from the host's fork server are in run_task.py within a second or two.
    code, output, context = launch(["--quiet", "--train_steps=100000000", "--timeout_secs=8"], tmp_path)
    assert code == 1 and "did not end within --timeout_secs=8" in output, context
    assert "Python stacks" in output, context
    for name in ("ps-0", "worker-0", "worker-1"):
        log = (tmp_path / "run" / f"{name}.log").read_text()
        assert "(most recent call first)" in log and "run_task" in log, f"{name}:\n{log[-3000:]}\n{context}"
