"""scripts/run_task.py end to end: real ps and worker processes on reserved loopback ports."""

import glob
import json
import os

import pytest

from ps_toolkit.launch.ports import reserve_ports
from tests.taskrun import RUN_TASK, describe_all, loopback_hosts, python_command, run_tasks

# Every task must exit by itself within this many seconds of the last step.
EXIT_BOUND_SECS = 10


def start_cluster(tmp_path, num_ps, num_workers, *extra, timeout=240, ps_timeout=60):
    ps_hosts, worker_hosts, reservation = loopback_hosts(num_ps, num_workers)
    common = [f"--ps_hosts={ps_hosts}", f"--worker_hosts={worker_hosts}", f"--checkpoint_dir={tmp_path}/ckpt"]
    commands = {}
    for i in range(num_ps):
        commands[f"ps:{i}"] = python_command(
            RUN_TASK, *common, "--job_name=ps", f"--task_index={i}", f"--ps_orphan_timeout_secs={ps_timeout}"
        )
    for i in range(num_workers):
        commands[f"worker:{i}"] = python_command(RUN_TASK, *common, "--job_name=worker", f"--task_index={i}", *extra)
    with reservation:  # held while the tasks run, so that no other reservation picks these ports
        return run_tasks(commands, timeout=timeout)


def check_trained(outcomes, tmp_path, train_steps):
    report = describe_all(outcomes)
    assert all(o.returncode == 0 for o in outcomes.values()), report
    workers = [o for name, o in outcomes.items() if name.startswith("worker")]
    results = [w.result() for w in workers]
    for result in results:
        assert result["global_step"] >= train_steps, report
        assert result["local_steps"] > 0, report
        assert set(result) >= {"job", "task", "global_step", "local_steps", "final_loss", "test_accuracy", "seconds"}
    # The replica that took the most steps must end below its first loss: one that joins a few seconds
    # late (the chief too) starts from an already trained model, its first batch loss as low as its last.
    busiest = max(results, key=lambda result: result["local_steps"])
    assert busiest["final_loss"] < busiest["first_loss"], report
    last_step_time = max(w.progress()[-1]["time"] for w in workers)
    for name, outcome in outcomes.items():
        assert outcome.ended_at - last_step_time < EXIT_BOUND_SECS, f"{name} lingered\n{report}"
    steps = sorted(int(p.split("-")[-1].split(".")[0]) for p in glob.glob(f"{tmp_path}/ckpt/model.ckpt-*.index"))
    # The chief saves on its way out, so the newest checkpoint holds the end of training.
    assert steps and steps[-1] >= train_steps, (steps, report)
    assert glob.glob(os.path.join(tmp_path, "ckpt", "events.out.tfevents.*")), "no summaries written"
    assert os.path.exists(os.path.join(tmp_path, "ckpt", "flags.json"))
    return results


@pytest.mark.slow
def test_async_one_ps_two_workers(tmp_path):
    # 1,000 steps: a few seconds at ~350 steps/s, so a worker that joins a second late still contributes.
    outcomes = start_cluster(tmp_path, 1, 2, "--train_steps=1000")
    results = check_trained(outcomes, tmp_path, 1000)
    assert min(r["test_accuracy"] for r in results) > 0.85, describe_all(outcomes)
    # Both workers contributed (how much depends on when each started, which the machine's load decides).
    assert all(r["local_steps"] > 0 for r in results), describe_all(outcomes)


@pytest.mark.slow
def test_sync_one_ps_two_workers_ends_promptly(tmp_path):
    outcomes = start_cluster(tmp_path, 1, 2, "--train_steps=200", "--sync_replicas", "--steps_per_run=20")
    results = check_trained(outcomes, tmp_path, 200)
    assert all(r["global_step"] == 200 for r in results), describe_all(outcomes)
    assert os.path.exists(tmp_path / "ckpt" / "model.ckpt-200.index"), "final sync checkpoint is not at the last step"


@pytest.mark.slow
def test_async_two_ps_two_workers_greedy(tmp_path):
    outcomes = start_cluster(
        tmp_path, 2, 2, "--train_steps=300", "--model=mlp", "--placement=greedy", "--partition_variables"
    )
    check_trained(outcomes, tmp_path, 300)


@pytest.mark.slow
def test_sync_two_ps_two_workers_one_step_per_run(tmp_path):
    # The sync loop is the test above; one step per run is the sync default.
    outcomes = start_cluster(tmp_path, 2, 2, "--train_steps=150", "--sync_replicas", "--model=mlp", "--steps_per_run=1")
    check_trained(outcomes, tmp_path, 150)


@pytest.mark.slow
def test_layers_computed_on_two_ps_train_async_and_sync(tmp_path):
    # --compute_near_weights: each layer runs on the ps holding its weights, so
    # activations hop between ps0 and ps1; async (in-graph loop) and sync.
    outcomes = start_cluster(tmp_path / "async", 2, 2, "--train_steps=300", "--model=mlp", "--compute_near_weights=all")
    results = check_trained(outcomes, tmp_path / "async", 300)
    assert min(r["test_accuracy"] for r in results) > 0.85, describe_all(outcomes)
    flags_used = tmp_path / "sync"
    outcomes = start_cluster(flags_used, 1, 2, "--train_steps=150", "--sync_replicas", "--compute_near_weights=all")
    check_trained(outcomes, flags_used, 150)


@pytest.mark.slow
def test_ps_gives_up_when_workers_never_come(tmp_path):
    ps_hosts, worker_hosts, reservation = loopback_hosts(1, 2)
    command = python_command(
        RUN_TASK,
        f"--ps_hosts={ps_hosts}",
        f"--worker_hosts={worker_hosts}",
        "--job_name=ps",
        "--task_index=0",
        "--ps_orphan_timeout_secs=2",
    )
    with reservation:
        outcome = run_tasks({"ps": command}, timeout=60)["ps"]
    assert outcome.returncode == 3, outcome.describe()
    assert "/job:worker/task:0, /job:worker/task:1" in outcome.stderr, outcome.describe()


@pytest.mark.slow
def test_tf_config_roles_chief_worker_ps_evaluator(tmp_path):
    reservation = reserve_ports(4)
    chief, worker, ps, evaluator = (f"localhost:{port}" for port in reservation.ports)
    cluster = {"chief": [chief], "worker": [worker], "ps": [ps], "evaluator": [evaluator]}
    flags = [f"--checkpoint_dir={tmp_path}/ckpt", "--train_steps=300", "--save_checkpoint_steps=100"]
    commands, envs = {}, {}
    for job in cluster:
        commands[job] = python_command(RUN_TASK, *flags)
        envs[job] = {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": job, "index": 0}})}
    with reservation:
        outcomes = run_tasks(commands, timeout=240, envs=envs)
    report = describe_all(outcomes)
    assert all(o.returncode == 0 for o in outcomes.values()), report
    assert outcomes["chief"].result()["global_step"] >= 300, report
    evaluation = outcomes["evaluator"].result()
    assert evaluation["global_step"] >= 300 and evaluation["evaluations"] >= 1, report
    assert evaluation["test_accuracy"] > 0.85, report
    assert glob.glob(f"{tmp_path}/ckpt/eval/events.out.tfevents.*"), "no eval summaries"
