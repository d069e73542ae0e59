"""Cluster parsing and validation: every bad input is one clear ConfigError."""

import json

import pytest

from ps_toolkit.base.errors import EXIT_CONFIG, ConfigError
from ps_toolkit.cluster import addresses
from ps_toolkit.cluster.config import ClusterConfig, resolve

PS, WORKERS = "localhost:2222", "localhost:2223,localhost:2224"


def flags_config(**overrides):
    args = dict(ps_hosts=PS, worker_hosts=WORKERS, job_name="worker", task_index=1)
    args.update(overrides)
    return ClusterConfig.from_host_flags(**args)


def tf_config(task_type="worker", index=0, **cluster_extra):
    cluster = {"ps": ["h0:2222"], "worker": ["h1:2222", "h2:2222"], **cluster_extra}
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


def test_flags_give_roles_and_devices():
    config = flags_config()
    assert config.device == "/job:worker/task:1"
    assert config.address == "localhost:2224"
    assert not config.is_chief
    assert config.num_ps == 1 and config.num_replicas == 2
    assert config.replica_index == 1
    assert flags_config(task_index=0).is_chief


def test_chief_job_is_the_chief_and_replica_zero():
    config = ClusterConfig.from_tf_config(tf_config("worker", 0, chief=["h3:2222"]))
    assert not config.is_chief
    assert config.chief_task == ("chief", 0)
    assert config.replica_index == 1
    assert config.num_replicas == 3
    assert config.for_task("chief", 0).is_chief


def test_evaluator_is_not_in_the_servers_cluster_spec():
    config = ClusterConfig.from_tf_config(tf_config("evaluator", 0, evaluator=["h4:2222"]))
    assert "evaluator" not in config.training_jobs()
    assert config.cluster_spec().jobs == ["ps", "worker"]


def test_tf_config_round_trip_and_host_flags():
    config = flags_config()
    again = ClusterConfig.from_tf_config(config.tf_config())
    assert dict(again.jobs) == dict(config.jobs)
    assert (again.task_type, again.task_index) == ("worker", 1)
    assert "--ps_hosts=localhost:2222" in config.host_flags()
    assert "--task_index=1" in config.host_flags()


def test_kubeflow_tf_config_with_environment_cloud_and_master_alias():
    text = json.dumps(
        {
            "cluster": {"master": ["job-master-0:2222"], "ps": ["job-ps-0:2222"], "worker": ["job-worker-0:2222"]},
            "task": {"type": "master", "index": 0},
            "environment": "cloud",
        }
    )
    config = ClusterConfig.from_tf_config(text)
    assert config.task_type == "chief" and config.is_chief
    assert config.environment == "cloud"


def test_default_cluster_is_the_textbook_one():
    config = resolve(job_name="ps", task_index=0)
    assert dict(config.jobs) == {
        "worker": ("localhost:2223", "localhost:2224"),
        "ps": ("localhost:2222",),
    }


def test_cluster_file(tmp_path):
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"ps": ["a:1"], "worker": ["b:2"]}))
    config = resolve(cluster_file=str(path), job_name="worker", task_index=0)
    assert config.address == "b:2"
    assert config.source == f"cluster file {path}"


def test_ipv6_address():
    assert addresses.split_address("[::1]:2222", "test") == ("::1", 2222)


BAD_INPUTS = {
    "empty ps list": (dict(ps_hosts=" "), "host list from --ps_hosts is empty"),
    "empty entry": (dict(worker_hosts="localhost:1,,localhost:2"), "has an empty entry"),
    "host without port": (dict(ps_hosts="localhost"), "is not host:port"),
    "port not a number": (dict(ps_hosts="localhost:http"), "bad port 'http'"),
    "port zero": (dict(ps_hosts="localhost:0"), "port 0, outside 1-65535"),
    "port too large": (dict(ps_hosts="localhost:70000"), "port 70000, outside 1-65535"),
    "empty host": (dict(ps_hosts=":2222"), "is not host:port"),
    "duplicate address": (dict(ps_hosts="localhost:2223"), "is used twice"),
    "unknown job": (dict(job_name="master_of_puppets"), "unknown job 'master_of_puppets'"),
    "index out of range": (dict(task_index=2), "task index 2 from flags is out of range"),
    "negative index": (dict(task_index=-1), "task index -1 from --task_index is negative"),
    "job not in cluster": (dict(job_name="chief"), "job 'chief' from flags is not in the cluster"),
    "no job name": (dict(job_name=None), "--job_name is not set"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_flags_raise_config_error(case):
    overrides, message = BAD_INPUTS[case]
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        flags_config(**overrides)
    assert info.value.exit_code == EXIT_CONFIG
    assert "\n" not in str(info.value)


BAD_TF_CONFIGS = {
    "not json": ("{cluster:", "TF_CONFIG is not valid JSON"),
    "not an object": ("[1, 2]", "TF_CONFIG must be a JSON object"),
    "no task": (json.dumps({"cluster": {"worker": ["a:1"]}}), "TF_CONFIG has no 'task'"),
    "no cluster": (json.dumps({"task": {"type": "worker", "index": 0}}), "TF_CONFIG has no 'cluster'"),
    "string index": (tf_config(index="1"), "task index '1' from TF_CONFIG task.index is not an integer"),
    "negative index": (tf_config(index=-3), "task index -3 from TF_CONFIG task.index is negative"),
    "unknown type": (tf_config("boss"), "unknown job 'boss' from TF_CONFIG task.type"),
    "index out of range": (tf_config(index=5), "task index 5 from TF_CONFIG is out of range"),
    "hosts not a list": (
        json.dumps({"cluster": {"worker": 7}, "task": {"type": "worker"}}),
        "TF_CONFIG cluster.worker must be a non-empty list",
    ),
    "two chiefs": (tf_config(chief=["c:1", "d:1"]), "has 2 chief tasks"),
}


@pytest.mark.parametrize("case", sorted(BAD_TF_CONFIGS))
def test_bad_tf_config_raises_config_error(case):
    text, message = BAD_TF_CONFIGS[case]
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ClusterConfig.from_tf_config(text)


def test_flags_that_disagree_with_tf_config():
    with pytest.raises(ConfigError, match="--ps_hosts=h9:2222 disagrees with TF_CONFIG"):
        resolve(ps_hosts="h9:2222", tf_config=tf_config())
    with pytest.raises(ConfigError, match="--job_name=ps disagrees with TF_CONFIG task type 'worker'"):
        resolve(job_name="ps", tf_config=tf_config())
    with pytest.raises(ConfigError, match="--task_index=1 disagrees with TF_CONFIG task index 0"):
        resolve(task_index=1, tf_config=tf_config())


def test_flags_that_agree_with_tf_config_are_accepted():
    config = resolve(ps_hosts="h0:2222", job_name="worker", task_index=0, tf_config=tf_config())
    assert config.source == "TF_CONFIG"


def test_unreadable_cluster_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read cluster file"):
        resolve(cluster_file=str(tmp_path / "missing.json"), job_name="ps")
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(ConfigError, match="is not valid JSON"):
        resolve(cluster_file=str(bad), job_name="ps")
