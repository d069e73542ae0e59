"""The engines' first-try rules without Ray or Spark: a Ray of the launch's own sized to its job, the flags
that fit a cluster, the executors' Python, and the one line for executors that cannot import ps_toolkit."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from ps_toolkit.backends.ray import sizing
from ps_toolkit.backends.ray.launcher import RayOptions
from ps_toolkit.backends.spark import executor_python, tasks
from ps_toolkit.base.errors import ConfigError

DEFAULT_JOB = ["ps", "worker", "worker"]  # ps-launch-ray's default topology, servers first


def _request(jobs=DEFAULT_JOB, floating=0, **options) -> sizing.JobRequest:
    return sizing.job_request(jobs, floating, RayOptions(**options).bundle)


def test_a_ray_of_its_own_holds_the_default_job_on_a_machine_of_fewer_cores(monkeypatch):
    monkeypatch.setattr(sizing.os, "cpu_count", lambda: 2)
    assert sizing.own_ray_cpus(_request(), None) == 3


def test_a_ray_of_its_own_keeps_the_machines_cores_when_they_are_more(monkeypatch):
    monkeypatch.setattr(sizing.os, "cpu_count", lambda: 16)
    assert sizing.own_ray_cpus(_request(), None) == 16


def test_elastic_slots_count_in_the_size_of_a_ray_of_its_own(monkeypatch):
    monkeypatch.setattr(sizing.os, "cpu_count", lambda: 1)
    assert (
        sizing.own_ray_cpus(_request(floating=2, worker_cpus=1.5), None) == 7
    )  # 1 ps CPU, 1.5 for each of 2 workers and 2 slots


def test_fractional_requests_round_up_to_whole_logical_cpus(monkeypatch):
    monkeypatch.setattr(sizing.os, "cpu_count", lambda: 1)
    assert sizing.own_ray_cpus(_request(ps_cpus=0.5, worker_cpus=0.6), None) == 2


def test_too_few_ray_num_cpus_fails_at_once_with_the_numbers_that_fit():
    with pytest.raises(ConfigError) as raised:
        sizing.own_ray_cpus(_request(), 2)
    message = str(raised.value)
    assert "--ray_num_cpus=2 cannot hold the job" in message
    assert "--ray_num_cpus=3" in message and "--ray_ps_cpus=0.66 --ray_worker_cpus=0.66" in message


def test_enough_ray_num_cpus_is_kept():
    assert sizing.own_ray_cpus(_request(), 3) == 3


def test_the_placement_refusal_names_the_per_task_flags_that_fit_the_free_cpus():
    message = sizing.placement_refusal("10.0.0.5:6379", _request(), 120, {"CPU": 2.0, "memory": 1e9})
    assert message.startswith("the Ray cluster at 10.0.0.5:6379 cannot hold the job: 3 bundles")
    assert "--ray_ps_cpus=0.66 --ray_worker_cpus=0.66 (at most 2 CPUs in all)" in message


def test_no_free_cpu_says_to_add_nodes():
    assert "add nodes" in sizing.fitting_flags(0.0, _request())


def test_more_gpus_than_a_ray_of_its_own_has_fails_at_once_naming_what_fits():
    with pytest.raises(ConfigError, match=r"has 1 GPUs and the job's tasks ask for 2 .*--ray_worker_gpus=0.5"):
        sizing.check_own_gpus(_request(worker_gpus=1.0), 1.0)
    sizing.check_own_gpus(_request(worker_gpus=0.5), 1.0)


def test_the_executors_run_the_launchers_python_unless_the_user_chose_one(monkeypatch):
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert executor_python.executor_python("local-cluster[3,1,1024]", {}) == sys.executable
    assert executor_python.executor_python("local[3]", {"spark.pyspark.python": "/opt/py"}) == "/opt/py"
    monkeypatch.setenv("PYSPARK_PYTHON", "/usr/bin/python3")
    assert executor_python.executor_python("local[3]", {"spark.pyspark.python": "/opt/py"}) == "/usr/bin/python3"


def test_an_executor_without_ps_toolkit_is_one_line_naming_its_python_and_what_to_set():
    error = (
        "An error occurred while calling z:org...collectAndServe.\nModuleNotFoundError: No module named 'ps_toolkit'"
    )
    line = executor_python.missing_toolkit_line(error, "/usr/bin/python3")
    assert line.startswith("the Spark executors' Python (/usr/bin/python3) cannot import ps_toolkit: ")
    assert "PYSPARK_PYTHON" in line and "\n" not in line


def test_an_executor_python_that_does_not_exist_is_named():
    error = 'java.io.IOException: Cannot run program "/home/me/.venv/bin/python": error=2, No such file'
    line = executor_python.missing_toolkit_line(error, "/home/me/.venv/bin/python")
    assert line.startswith("the Spark executors cannot run their Python (/home/me/.venv/bin/python)")


def test_any_other_stage_failure_is_not_taken_for_a_missing_toolkit():
    assert executor_python.missing_toolkit_line("No module named 'numpy'", sys.executable) is None


def _infos(*hosts):
    return [SimpleNamespace(address=f"{host}:{40000 + i}") for i, host in enumerate(hosts)]


def test_a_stage_on_one_host_serves_on_loopback_and_one_over_hosts_on_each_executors_host():
    assert [tasks._task_host(_infos("10.0.0.7", "10.0.0.7"), i) for i in range(2)] == ["127.0.0.1"] * 2
    assert [tasks._task_host(_infos("10.0.0.7", "10.0.0.8"), i) for i in range(2)] == ["10.0.0.7", "10.0.0.8"]


def test_ps_launch_ray_with_too_few_ray_num_cpus_is_one_line_before_any_ray_starts(tmp_path):
    argv = [sys.executable, "-m", "ps_toolkit.tools.launch_ray", f"--log_dir={tmp_path}", "--ray_num_cpus=2"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=240)
    assert done.returncode == 2, (done.stdout, done.stderr)
    stderr = done.stderr.strip()
    assert stderr.startswith("launch_ray: --ray_num_cpus=2 cannot hold the job: its 3 tasks ask for 3 CPUs; give "), (
        stderr
    )
    assert "\n" not in stderr and "connecting to" not in done.stdout, (done.stdout, stderr)
