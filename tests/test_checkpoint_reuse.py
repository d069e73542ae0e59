"""The textbook three-terminal run, run again: it says it resumes; with another model it is refused at once."""

import os
import re
import time

import pytest

from tests.taskrun import RUN_TASK, loopback_hosts, python_command, run_tasks


@pytest.mark.slow
def test_a_rerun_says_it_resumes_and_another_model_is_refused_in_one_line(tmp_path, request):
    ps_hosts, worker_hosts, reservation = loopback_hosts(1, 2)
    request.addfinalizer(reservation.release)  # held while the tasks run: no other reservation picks these ports
    hosts = [f"--ps_hosts={ps_hosts}", f"--worker_hosts={worker_hosts}"]
    env = {"TMPDIR": str(tmp_path)}  # the default --checkpoint_dir lives under it
    tasks = {
        "ps": python_command(RUN_TASK, *hosts, "--job_name=ps", "--task_index=0"),
        "worker:0": python_command(RUN_TASK, *hosts, "--job_name=worker", "--task_index=0", "--train_steps=200"),
        "worker:1": python_command(RUN_TASK, *hosts, "--job_name=worker", "--task_index=1", "--train_steps=200"),
    }
    checkpoint_dir = (
        tmp_path / f"ps_toolkit-{os.getuid()}" / "checkpoints" / worker_hosts.split(",")[0].replace(":", "_")
    )

    first = run_tasks(tasks, timeout=300, env=env)
    assert all(o.returncode == 0 for o in first.values()), "\n".join(o.describe() for o in first.values())
    step = first["worker:0"].result()["global_step"]

    again = run_tasks(tasks, timeout=300, env=env)
    assert all(o.returncode == 0 for o in again.values()), "\n".join(o.describe() for o in again.values())
    resumed = re.search(
        rf"resuming from global step (\d+) in {re.escape(str(checkpoint_dir))}\n", again["worker:0"].stderr
    )
    assert resumed and 200 <= int(resumed.group(1)) <= step, again["worker:0"].describe()
    assert again["worker:0"].result()["local_steps"] <= 2 * 20  # nothing left to train: at most a run per replica

    started = time.monotonic()
    mlp = tasks["worker:0"] + ["--model=mlp"]
    refused = run_tasks({"worker:0": mlp}, timeout=120, env=env)["worker:0"]
    detail = refused.describe()
    assert refused.returncode == 2, detail
    assert "Traceback" not in refused.stderr, detail
    errors = [line for line in refused.stderr.splitlines() if "run_task.py: error: " in line]
    assert len(errors) == 1, detail
    assert f"checkpoint dir {checkpoint_dir} holds a checkpoint of another model" in errors[0], detail
    assert "model/hidden0" in errors[0], detail
    assert time.monotonic() - started < 60, detail
