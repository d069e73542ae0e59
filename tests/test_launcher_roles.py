"""The launcher's roles and verdict: a master chief, replicas that fail after the chief, nothing trained, task args."""

from __future__ import annotations

import json

from tests.test_launcher import all_pids, assert_all_gone, explain, flag_value, records, run_launcher


# The verdict (ps_toolkit/launch/verdict.py): the chief's status 0 is not enough.
def test_a_master_chief_gets_its_role_in_tf_config_and_flags(tmp_path):
    code, output, _, argv = run_launcher(["--chief", "--chief_role_name=master", "--num_workers=1"], [], tmp_path)
    assert code == 0, explain(argv, code, output)
    chief = next(r for r in records(tmp_path) if flag_value(r["argv"], "job_name") == "master")
    tf_config = json.loads(chief["tf_config"])
    assert tf_config["task"] == {"type": "master", "index": 0} and "chief" not in tf_config["cluster"], tf_config
    assert flag_value(chief["argv"], "master_hosts") == tf_config["cluster"]["master"][0], chief
    assert "succeeded: the chief (chief:0) finished with status 0" in output, explain(argv, code, output)


def test_a_worker_that_fails_after_the_chief_ended_fails_the_run(tmp_path):
    fake = ["--fail=worker:1", "--fail_status=5", "--fail_after_chief"]
    code, output, _, argv = run_launcher(["--grace_secs=60"], fake, tmp_path)
    assert code == 5, explain(argv, code, output)
    verdict = output[output.index("launcher: FAILED:") :]
    assert verdict.startswith("launcher: FAILED: the chief (worker:0) finished with status 0, but worker:1"), verdict
    assert "status 5" in verdict and "worker:1 is about to fail" in verdict, verdict
    assert_all_gone(all_pids(tmp_path), output)


def test_a_chief_that_returns_without_training_fails_the_run(tmp_path):
    code, output, _, argv = run_launcher([], ["--steps=0", "--no_result", "--ps=exit0"], tmp_path)
    assert code == 1, explain(argv, code, output)
    verdict = output[output.index("launcher: FAILED:") :]
    assert "finished with status 0, but nothing trained" in verdict, verdict
    assert "worker:0 starting" in verdict, "the chief's last lines are shown\n" + verdict


def test_task_args_give_the_role_under_the_scripts_own_flag_names(tmp_path):
    template = "--task_mode={job} --task_id={index} --ps_hosts={ps_hosts} --worker_hosts={worker_hosts}"
    code, output, _, argv = run_launcher([f"--task_args={template}"], [], tmp_path)
    assert code == 0, explain(argv, code, output)
    worker1 = next(r for r in records(tmp_path) if "--task_id=1" in r["argv"])
    assert "--task_mode=worker" in worker1["argv"] and "--job_name=worker" not in " ".join(worker1["argv"]), worker1
    assert json.loads(worker1["tf_config"])["task"] == {"type": "worker", "index": 1}, worker1


def test_task_args_none_gives_tf_config_alone(tmp_path):
    code, output, _, argv = run_launcher(["--task_args=none", "--num_ps=0", "--num_workers=1"], [], tmp_path)
    assert code == 0, explain(argv, code, output)
    (record,) = records(tmp_path)
    assert not any(a.startswith(("--job_name", "--worker_hosts", "--task_index")) for a in record["argv"]), record
    assert json.loads(record["tf_config"])["task"] == {"type": "worker", "index": 0}, record
