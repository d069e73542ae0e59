"""A task that does not end says where it waits: its Python stacks, in the error and in its log."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ps_toolkit.launch.local_cluster import LocalCluster, TaskFailedError
from ps_toolkit.launch.task_plan import default_command
from ps_toolkit.process import lifecycle, stack_dump
from tests import logwatch

WAITING_PROGRAM = """
import faulthandler, signal, sys, threading
faulthandler.register(signal.SIGUSR1, all_threads=True)
print("ready", flush=True)
def waits_for_ever():
    threading.Event().wait(120)
waits_for_ever()
"""


def test_only_the_toolkits_task_entry_is_sent_the_signal():
    assert stack_dump.dumps_stacks(default_command(["--train_steps=1"]))
    assert stack_dump.dumps_stacks([sys.executable, "-m", "ps_toolkit.tools.run_task"])
    assert not stack_dump.dumps_stacks([sys.executable, "-m", "ps_toolkit_compat.run_legacy", "x.py"])
    assert not stack_dump.dumps_stacks([sys.executable, "their_script.py"])
    assert not stack_dump.dumps_stacks(["bash"])


def test_a_waiting_process_writes_its_stacks_and_goes_on(tmp_path):
    log_path = tmp_path / "task.log"
    with open(log_path, "ab") as log:
        proc = lifecycle.spawn([sys.executable, "-c", WAITING_PROGRAM], env={}, stdout=log, stderr=log)
    try:
        logwatch.wait_until(lambda: "ready" in log_path.read_text(), 30, "the program's ready line")
        stacks = stack_dump.request_stacks(proc.pid, str(log_path))
        assert stacks is not None and "waits_for_ever" in stacks, log_path.read_text()
        assert proc.poll() is None, "the signal must not end the task"
    finally:
        lifecycle.stop_trees([proc], grace_secs=1.0)


def test_a_gone_process_gives_no_stacks(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=30)
    (tmp_path / "task.log").write_text("")
    assert stack_dump.request_stacks(proc.pid, str(tmp_path / "task.log"), timeout_secs=0.5) is None


def test_local_cluster_wait_shows_where_a_task_waits(tmp_path):
    """A worker whose ps is gone waits in session creation: the timeout error carries its stacks."""
    args = ["--train_steps=100", "--watchdog_secs=0"]
    with LocalCluster(num_ps=1, num_workers=1, train_args=args, log_dir=str(tmp_path)) as cluster:
        cluster.kill("ps", 0)
        worker_log = cluster.log_path("worker", 0)
        logwatch.wait_until(
            lambda: "started /job:worker/task:0" in logwatch.read_log(worker_log), 120, "the worker's server"
        )
        with pytest.raises(TaskFailedError, match="worker:0 did not end in time") as caught:
            cluster.wait(["worker"], timeout_secs=1)
        assert "Python stacks" in str(caught.value) and "run_task" in str(caught.value), str(caught.value)
        assert cluster.returncode("worker", 0) is None
