"""The TF_CONFIG the Kubeflow operator writes runs a real 1 ps + 2 worker cluster through run_task.py."""

import glob
import json

import pytest

from ps_toolkit.launch.ports import reserve_ports
from tests.taskrun import RUN_TASK, assert_cluster_trained, python_command, run_tasks

TRAIN_STEPS = 200


def operator_tf_config(cluster: dict, job: str, index: int) -> str:
    """TF_CONFIG as the Kubeflow training operator writes it (Go's json.Marshal of its TFConfig struct)."""
    payload = {"cluster": dict(sorted(cluster.items())), "task": {"type": job, "index": index}, "environment": "cloud"}
    return json.dumps(payload, separators=(",", ":"))


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_operator_tf_config_trains_a_local_cluster(tmp_path):
    reservation = reserve_ports(3)
    ps, *workers = (f"localhost:{port}" for port in reservation.ports)
    # The operator's addresses are per-pod Service names; on one machine, loopback ports stand in for them.
    cluster = {"ps": [ps], "worker": workers}
    flags = [f"--checkpoint_dir={tmp_path}/ckpt", f"--train_steps={TRAIN_STEPS}", "--ps_orphan_timeout_secs=60"]
    tasks = [("ps", 0), ("worker", 0), ("worker", 1)]
    commands = {f"{job}:{i}": python_command(RUN_TASK, *flags) for job, i in tasks}
    envs = {f"{job}:{i}": {"TF_CONFIG": operator_tf_config(cluster, job, i)} for job, i in tasks}
    with reservation:  # held while the tasks run, so that no other reservation picks these ports
        outcomes = run_tasks(commands, timeout=150, envs=envs)
    report = assert_cluster_trained(outcomes, TRAIN_STEPS)
    assert glob.glob(f"{tmp_path}/ckpt/model.ckpt-*.index"), report
