"""The cluster from a Slurm step's environment (no Slurm needed), and the sbatch script written for it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ps_toolkit.backends import slurm as slurm_job
from ps_toolkit.base.errors import ConfigError
from ps_toolkit.cluster import slurm
from tests.taskrun import REPO, RUN_TASK

MAKE_SLURM_JOB = os.path.join(REPO, "scripts", "make_slurm_job.py")


def step_env(nodelist: str, tasks_per_node: str, rank: int, **extra) -> dict:
    """The variables srun sets for one task of a step."""
    counts = slurm.expand_tasks_per_node(tasks_per_node, "test")
    env = {
        "SLURM_STEP_NODELIST": nodelist,
        "SLURM_STEP_TASKS_PER_NODE": tasks_per_node,
        "SLURM_STEP_NUM_TASKS": str(sum(counts)),
        "SLURM_PROCID": str(rank),
    }
    env.update(extra)
    return env


@pytest.mark.parametrize(
    "text, hosts",
    [
        ("node[01-03,07],gpu5", ["node01", "node02", "node03", "node07", "gpu5"]),
        ("n[1-2],m5,o[3-4,6,7-9]", ["n1", "n2", "m5", "o3", "o4", "o6", "o7", "o8", "o9"]),  # TF's docstring example
        ("host", ["host"]),
        ("a[8-11]", ["a8", "a9", "a10", "a11"]),
        ("r[1-2]-n[01-02]", ["r1-n01", "r1-n02", "r2-n01", "r2-n02"]),
        ("node[1-2]-ib,x.example.com", ["node1-ib", "node2-ib", "x.example.com"]),
        ("n[007-009]", ["n007", "n008", "n009"]),
    ],
)
def test_expand_hostlist(text, hosts):
    assert slurm.expand_hostlist(text, "SLURM_JOB_NODELIST") == hosts


@pytest.mark.parametrize("text", ["n[1-2", "n1-2]", "n[a-b]", "n[3-1]", "n[]", ",n1", "n1,,n2", "[1-2]", "n[1-[2]]"])
def test_bad_hostlists_name_the_variable(text):
    with pytest.raises(ConfigError, match=r"^SLURM_JOB_NODELIST="):
        slurm.expand_hostlist(text, "SLURM_JOB_NODELIST")


def test_expand_tasks_per_node():
    assert slurm.expand_tasks_per_node("2(x3),1", "v") == [2, 2, 2, 1]
    assert slurm.expand_tasks_per_node("4", "v") == [4]
    for bad in ("", "2(x)", "x", "0", "2(x3)1"):
        with pytest.raises(ConfigError, match="SLURM_TASKS_PER_NODE="):
            slurm.expand_tasks_per_node(bad, "SLURM_TASKS_PER_NODE")


def test_rank_addresses_block_and_cyclic():
    assert slurm.rank_addresses(["a", "b"], [2, 1], "block", 2222) == ["a:2222", "a:2223", "b:2222"]
    assert slurm.rank_addresses(["a", "b"], [2, 1], "cyclic", 2222) == ["a:2222", "b:2222", "a:2223"]


def test_first_ranks_are_ps_and_the_rest_workers():
    env = step_env("node[1-2]", "2(x2)", rank=2, SLURMD_NODENAME="node2", SLURM_LOCALID="0")
    config = slurm.cluster_from_slurm_env(env, num_ps=1, base_port=9000)
    assert dict(config.jobs) == {"ps": ("node1:9000",), "worker": ("node1:9001", "node2:9000", "node2:9001")}
    assert config.device == "/job:worker/task:1"
    assert config.source == slurm.SOURCE


def test_roles_as_the_user_asks():
    env = step_env("n[1-5]", "1(x5)", rank=1)
    config = slurm.cluster_from_slurm_env(env, roles="ps:2,chief:1,worker:*,evaluator:1")
    assert {job: len(hosts) for job, hosts in config.jobs.items()} == {"ps": 2, "chief": 1, "worker": 1, "evaluator": 1}
    assert config.device == "/job:ps/task:1" and config.jobs["chief"] == ("n3:8888",)


def test_batch_script_environment_is_used_outside_a_step():
    env = {"SLURM_JOB_NODELIST": "c[1-3]", "SLURM_TASKS_PER_NODE": "1(x3)", "SLURM_NTASKS": "3", "SLURM_PROCID": "0"}
    config = slurm.cluster_from_slurm_env(env, num_ps=1, base_port=2222)
    assert config.device == "/job:ps/task:0" and config.jobs["worker"] == ("c2:2222", "c3:2222")


@pytest.mark.parametrize(
    "env, kwargs, message",
    [
        ({}, {}, "SLURM_JOB_NODELIST is not set"),
        (step_env("n1", "3", rank=3), {}, "SLURM_PROCID='3'"),
        (step_env("n[1-2]", "3", rank=0), {}, "names 2 node"),
        (dict(step_env("n1", "3", rank=0), SLURM_STEP_NUM_TASKS="4"), {}, "SLURM_STEP_NUM_TASKS='4'"),
        (step_env("n[1-2]", "1(x2)", rank=1, SLURMD_NODENAME="n1"), {}, "SLURMD_NODENAME='n1'"),
        (step_env("n1", "2", rank=1, SLURM_LOCALID="0"), {}, "SLURM_LOCALID=0"),
        (step_env("n1", "2", rank=0, SLURM_DISTRIBUTION="plane=2"), {}, "SLURM_DISTRIBUTION"),
        (step_env("n1", "2", rank=0), {"num_ps": 2}, "leave no worker"),
        (step_env("n1", "2", rank=0), {"base_port": 65535}, "base port 65535"),
        (step_env("n1", "3", rank=0), {"roles": "ps:1,worker:1"}, "asks for 2 tasks"),
        (step_env("n1", "3", rank=0), {"roles": "ps:1,boss:*"}, "bad entry"),
        (step_env("n1", "3", rank=0), {"roles": "ps:3"}, "no worker or chief"),
    ],
)
def test_bad_environments_are_one_clear_error(env, kwargs, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        slurm.cluster_from_slurm_env(env, **kwargs)


@pytest.mark.parametrize(
    "nodelist, tasks_per_node, rank",
    [("node1", "3", 0), ("node1", "3", 2), ("node[1-3]", "1(x3)", 1), ("gpu[01-02]", "2,1", 2), ("a[1-2]", "2(x2)", 3)],
)
def test_same_cluster_as_tensorflows_slurm_cluster_resolver(monkeypatch, nodelist, tasks_per_node, rank):
    resolver_module = pytest.importorskip("tensorflow.python.distribute.cluster_resolver.slurm_cluster_resolver")
    env = step_env(nodelist, tasks_per_node, rank)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    num_tasks = int(env["SLURM_STEP_NUM_TASKS"])
    resolver = resolver_module.SlurmClusterResolver(
        jobs={"ps": 1, "worker": num_tasks - 1}, port_base=7000, gpus_per_node=4, gpus_per_task=1, auto_set_gpu=False
    )
    expected = resolver.cluster_spec().as_dict()
    config = slurm.cluster_from_slurm_env(env, num_ps=1, base_port=7000)
    assert {job: list(hosts) for job, hosts in config.jobs.items()} == expected
    assert (config.task_type, config.task_index) == (resolver.task_type, resolver.task_id)


def test_sbatch_script_runs_one_step_with_every_task():
    script = slurm_job.sbatch_script(
        python="/usr/bin/python3",
        run_task="/opt/ps toolkit/scripts/run_task.py",
        roles=[("ps", 1), ("worker", 2)],
        task_args=["--train_steps=10"],
        base_port=3000,
        sbatch_options=["--time=00:05:00"],
    )
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash" and "#SBATCH --ntasks=3" in lines and "#SBATCH --time=00:05:00" in lines
    step = lines[-1].strip()
    assert lines[-2].startswith("exec srun --ntasks=3 --kill-on-bad-exit=1")
    assert step == (
        "/usr/bin/python3 '/opt/ps toolkit/scripts/run_task.py' --cluster_from=slurm "
        "--slurm_roles=ps:1,worker:2 --slurm_port_base=3000 --train_steps=10"
    )


def test_make_slurm_job_passes_training_flags_through():
    done = subprocess.run(
        [
            sys.executable,
            MAKE_SLURM_JOB,
            "--num_ps=2",
            "--num_workers=3",
            "--chief",
            "--sync_replicas",
            "--time=1:00:00",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "#SBATCH --ntasks=6" in done.stdout and "#SBATCH --time=1:00" in done.stdout
    assert f"{RUN_TASK} --cluster_from=slurm --slurm_roles=ps:2,chief:1,worker:3" in done.stdout
    assert done.stdout.rstrip().endswith("--sync_replicas")
    assert "--allow_open_ports" not in done.stdout  # by default the tasks fence their ports or refuse


def test_make_slurm_job_says_the_network_is_private_only_when_told():
    command = [sys.executable, MAKE_SLURM_JOB, "--allow_open_ports"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("--allow_open_ports")


@pytest.mark.parametrize(
    "args, message",
    [(["--num_workers=0"], "need ps >= 0"), (["--model=nope"], "--model"), (["--port_base=0"], "--port_base")],
)
def test_make_slurm_job_bad_flags_are_one_line_and_status_2(args, message):
    done = subprocess.run([sys.executable, MAKE_SLURM_JOB, *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and not done.stdout, done.stderr
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_run_task_reports_a_bad_slurm_environment_in_one_line():
    env = dict(os.environ, **step_env("node1", "3", rank=7))
    env.pop("TF_CONFIG", None)
    done = subprocess.run(
        [sys.executable, RUN_TASK, "--cluster_from=slurm"], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 2, done.stderr
    assert (
        done.stderr.strip() == "run_task.py: error: SLURM_PROCID='7' is not a task rank in 0-2 (run the task with srun)"
    )
