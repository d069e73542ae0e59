"""LocalCluster with fake tasks (fast), InProcessCluster (TensorFlow in this process)."""

from __future__ import annotations

import os
import signal
import sys

import psutil
import pytest

from ps_toolkit.launch.local_cluster import LocalCluster, TaskFailedError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAKE_TASK = [sys.executable, os.path.join(ROOT, "tests", "fixtures", "fake_task.py")]


def test_cluster_spec_addresses_and_wait(tmp_path):
    with LocalCluster(num_ps=1, num_workers=2, command=FAKE_TASK, log_dir=str(tmp_path)) as cluster:
        spec = cluster.cluster_spec
        assert set(spec) == {"ps", "worker"} and len(spec["worker"]) == 2
        assert cluster.addresses["worker:1"] == spec["worker"][1]
        assert cluster.wait(["worker"], timeout_secs=30) == {"worker:0": 0, "worker:1": 0}
        assert cluster.returncode("ps", 0) is None, "the fake ps blocks until stopped"
        ps_pid = cluster.pid("ps", 0)
        assert cluster.cluster_config("worker", 1).is_chief is False
    assert not psutil.pid_exists(ps_pid) or psutil.Process(ps_pid).status() == psutil.STATUS_ZOMBIE
    assert "worker:1 starting" in (tmp_path / "worker-1.log").read_text()


def test_kill_and_restart_keep_the_address(tmp_path):
    with LocalCluster(num_ps=1, num_workers=1, command=[*FAKE_TASK, "--hang=worker:0"], log_dir=str(tmp_path)) as c:
        address, first = c.addresses["ps:0"], c.pid("ps", 0)
        assert c.kill("ps", 0) == -signal.SIGKILL
        c.restart("ps", 0)
        assert c.pid("ps", 0) != first and c.returncode("ps", 0) is None
        assert c.addresses["ps:0"] == address and c.restarts["ps:0"] == 1
        pids = [c.pid("ps", 0), c.pid("worker", 0)]
    _, alive = psutil.wait_procs([psutil.Process(p) for p in pids if psutil.pid_exists(p)], timeout=10)
    assert all(p.status() == psutil.STATUS_ZOMBIE for p in alive), alive
    assert (tmp_path / "ps-0.log").read_text().count("--- start:") == 2


def test_wait_raises_with_the_log_tail_of_a_failed_task(tmp_path):
    command = [*FAKE_TASK, "--fail=worker:1", "--fail_status=3", "--hang=worker:0"]
    cluster = LocalCluster(num_ps=1, num_workers=2, command=command, log_dir=str(tmp_path))
    with cluster, pytest.raises(TaskFailedError, match="worker:1 exited with status 3") as caught:
        cluster.wait(timeout_secs=30)
    assert "worker:1 is about to fail" in caught.value.log_tail


def test_wait_is_bounded(tmp_path):
    cluster = LocalCluster(num_ps=1, num_workers=1, command=[*FAKE_TASK, "--hang=worker:0"], log_dir=str(tmp_path))
    with cluster, pytest.raises(TaskFailedError, match="worker:0 did not end in time"):
        cluster.wait(timeout_secs=0.5)


def test_unknown_task_is_named():
    cluster = LocalCluster(num_ps=1, num_workers=1, command=FAKE_TASK)
    with pytest.raises(KeyError, match="no task ps:3"):
        cluster.kill("ps", 3)


def test_in_process_cluster_runs_a_step_on_the_ps(in_process_cluster):
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        with tf.compat.v1.device("/job:ps/task:0"):
            counter = tf.compat.v1.get_variable("launcher_test_counter", initializer=0, use_resource=False)
        increment = tf.compat.v1.assign_add(counter, 5)
        init = tf.compat.v1.global_variables_initializer()
    with tf.compat.v1.Session(in_process_cluster.targets["worker"][0], graph=graph) as session:
        session.run(init)
        session.run(increment)
    with tf.compat.v1.Session(in_process_cluster.targets["worker"][1], graph=graph) as session:
        assert session.run(increment) == 10  # the variable lives on the shared ps
    assert set(in_process_cluster.cluster_spec) == {"ps", "worker"}


def test_verdict_is_the_launchers_rule(tmp_path):
    with LocalCluster(num_ps=1, num_workers=1, command=FAKE_TASK, log_dir=str(tmp_path / "a")) as cluster:
        assert cluster.verdict(timeout_secs=30) == "the result line of worker:0"
    silent = [*FAKE_TASK, "--steps=0", "--no_result"]
    cluster = LocalCluster(num_ps=1, num_workers=1, chief=True, command=silent, log_dir=str(tmp_path / "b"))
    with cluster, pytest.raises(TaskFailedError, match="finished with status 0, but nothing trained") as caught:
        cluster.verdict(timeout_secs=30)
    assert caught.value.name == "chief:0" and "chief:0 starting" in str(caught.value)
