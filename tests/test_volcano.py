"""The Volcano Job manifest: parsed, checked against the fields and rules of Volcano's batch/v1alpha1 Job and its
admission webhook, and the TF_CONFIG its tensorflow plugin writes accepted by the toolkit."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ps_toolkit.backends import kubernetes, volcano
from ps_toolkit.cluster.config import ClusterConfig
from tests.taskrun import REPO

yaml = pytest.importorskip("yaml", reason="PyYAML parses the manifests in these tests (pip install pyyaml)")
jsonschema = pytest.importorskip("jsonschema", reason="jsonschema checks the manifests (pip install jsonschema)")


def strict(properties: dict, required=()) -> dict:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


# Volcano's LifecyclePolicy: an event (or events) or a non-zero exit code, never both (its webhook refuses it).
EVENTS = ["*", "PodPending", "PodRunning", "PodFailed", "PodEvicted", "Unknown", "TaskCompleted", "TaskFailed"]
ACTIONS = ["AbortJob", "RestartJob", "RestartTask", "RestartPod", "TerminateJob", "CompleteJob", "ResumeJob"]
POLICY = {
    "oneOf": [
        strict({"event": {"enum": EVENTS}, "action": {"enum": ACTIONS}}, ["event", "action"]),
        strict(
            {"exitCode": {"type": "integer", "not": {"const": 0}}, "action": {"enum": ACTIONS}}, ["exitCode", "action"]
        ),
    ]
}
LABELS = {"type": "object", "additionalProperties": {"type": "string"}}
TASK = strict(
    {
        "name": {"type": "string", "pattern": "^[a-z]([-a-z0-9]*[a-z0-9])?$"},
        "replicas": {"type": "integer", "minimum": 1},
        "template": strict({"metadata": strict({"labels": LABELS}), "spec": {"type": "object"}}, ["spec"]),
    },
    ["name", "replicas", "template"],
)
VOLCANO_JOB_SCHEMA = strict(
    {
        "apiVersion": {"const": "batch.volcano.sh/v1alpha1"},
        "kind": {"const": "Job"},
        "metadata": strict({"name": {}, "namespace": {}, "labels": LABELS}, ["name"]),
        "spec": strict(
            {
                "schedulerName": {"const": "volcano"},
                "minAvailable": {"type": "integer", "minimum": 1},
                "maxRetry": {"type": "integer", "minimum": 0},
                "plugins": {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}}},
                "policies": {"type": "array", "items": POLICY},
                "tasks": {"type": "array", "items": TASK, "minItems": 1},
            },
            ["minAvailable", "tasks"],
        ),
    },
    ["apiVersion", "kind", "metadata", "spec"],
)


def make_spec(**overrides) -> kubernetes.KubeSpec:
    settings = dict(name="mnist", image="registry.local/ps_toolkit:1", roles=(("ps", 2), ("worker", 3)))
    settings.update(overrides)
    return kubernetes.KubeSpec(**settings)


def plugin_tf_config(job: dict, task_name: str, index: int, port: int) -> str:
    """TF_CONFIG as Volcano's tensorflow plugin writes it: hosts <job>-<task>-<i>.<job>:<port>, by task name."""
    name = job["metadata"]["name"]
    cluster = {
        task["name"]: [f"{name}-{task['name']}-{i}.{name}:{port}" for i in range(task["replicas"])]
        for task in job["spec"]["tasks"]
    }
    return json.dumps({"cluster": cluster, "task": {"type": task_name, "index": index}})


@pytest.mark.parametrize("restart_policy", ["OnFailure", "ExitCode", "Never"])
def test_the_volcano_job_round_trips_and_matches_the_schema_and_webhook_rules(restart_policy):
    spec = make_spec(roles=(("chief", 1), ("ps", 2), ("worker", 3), ("evaluator", 1)), restart_policy=restart_policy)
    documents = list(yaml.safe_load_all(kubernetes.to_yaml(volcano.volcano_objects(spec))))
    assert documents == volcano.volcano_objects(spec)
    job, policy = documents
    assert policy == kubernetes.network_policy(spec)
    jsonschema.validate(job, VOLCANO_JOB_SCHEMA)
    tasks = job["spec"]["tasks"]
    assert [(t["name"], t["replicas"]) for t in tasks] == [("chief", 1), ("ps", 2), ("worker", 3), ("evaluator", 1)]
    # Gang scheduling: the whole cluster or nothing (the webhook refuses minAvailable above the replicas).
    assert job["spec"]["minAvailable"] == sum(t["replicas"] for t in tasks) == 7
    assert job["spec"]["plugins"] == {"tensorflow": ["--port=2222"], "svc": []}
    pods = [t["template"]["spec"] for t in tasks]
    assert all(p["containers"][0]["ports"] == [{"name": "tfjob-port", "containerPort": 2222}] for p in pods)
    exit_codes = [p["exitCode"] for p in job["spec"]["policies"] if "exitCode" in p]
    if restart_policy == "ExitCode":
        assert exit_codes == list(kubernetes.PERMANENT_EXIT_CODES) and all(p["restartPolicy"] == "Never" for p in pods)
    else:
        assert exit_codes == []
    # The NetworkPolicy selects every pod of the Job.
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert all(selector.items() <= t["template"]["metadata"]["labels"].items() for t in tasks)


@pytest.mark.parametrize("task_name, index", [("ps", 1), ("worker", 2), ("chief", 0), ("evaluator", 0)])
def test_the_plugins_tf_config_is_the_toolkits_cluster(task_name, index):
    spec = make_spec(roles=(("chief", 1), ("ps", 2), ("worker", 3), ("evaluator", 1)), port=2345)
    job = volcano.volcano_job(spec)
    config = ClusterConfig.from_tf_config(plugin_tf_config(job, task_name, index, 2345))
    assert (config.task_type, config.task_index) == (task_name, index)
    assert config.address == volcano.volcano_host(spec, task_name, index) == f"mnist-{task_name}-{index}.mnist:2345"
    assert config.num_ps == 2 and config.num_replicas == 4


def test_make_tfjob_writes_a_volcano_job_and_refuses_two_forms():
    script = os.path.join(REPO, "scripts", "make_tfjob.py")
    done = subprocess.run(
        [sys.executable, script, "--image=img:1", "--volcano", "--num_ps=2", "--train_steps=50"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    job, policy = yaml.safe_load_all(done.stdout)
    jsonschema.validate(job, VOLCANO_JOB_SCHEMA)
    assert policy["kind"] == "NetworkPolicy"
    assert job["spec"]["tasks"][1]["template"]["spec"]["containers"][0]["args"] == ["--train_steps=50"]
    both = subprocess.run([sys.executable, script, "--image=x", "--volcano", "--plain"], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert both.returncode == 2 and "--plain and --volcano" in both.stderr and not both.stdout, both.stderr
