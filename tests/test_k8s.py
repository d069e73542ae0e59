"""Kubernetes manifests (TFJob and plain objects): parsed, checked against schemas, TF_CONFIG as written."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ps_toolkit.backends import kubernetes
from ps_toolkit.base.errors import ConfigError
from ps_toolkit.cluster.config import ClusterConfig
from tests.taskrun import REPO
from tests.test_k8s_cluster import operator_tf_config

yaml = pytest.importorskip("yaml", reason="PyYAML parses the manifests in these tests (pip install pyyaml)")
jsonschema = pytest.importorskip("jsonschema", reason="jsonschema checks the manifests (pip install jsonschema)")

MAKE_TFJOB = os.path.join(REPO, "scripts", "make_tfjob.py")
# Set to a copy of the training operator's CRD (manifests/base/crds/kubeflow.org_tfjobs.yaml) to check against it.
CRD_ENV = "PS_TOOLKIT_TFJOB_CRD"


def strict(properties: dict, required=()) -> dict:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
CONTAINER = strict(
    {
        "name": {"const": "tensorflow"},
        "image": {"type": "string", "minLength": 1},
        "command": {"type": "array", "items": {"type": "string"}},
        "args": {"type": "array", "items": {"type": "string"}},
        "ports": {"type": "array", "items": strict({"name": {"type": "string"}, "containerPort": {"type": "integer"}})},
        "env": {"type": "array", "items": {"type": "object", "required": ["name"]}},
        "volumeMounts": {"type": "array", "items": strict({"name": {}, "mountPath": {}}, ["name", "mountPath"])},
    },
    ["name", "image"],
)
POD_SPEC = strict(
    {
        "containers": {"type": "array", "items": CONTAINER, "minItems": 1},
        "volumes": {"type": "array"},
        "subdomain": {"type": "string"},
        "restartPolicy": {"enum": ["Always", "OnFailure", "Never"]},
    },
    ["containers"],
)
TEMPLATE = strict({"metadata": strict({"labels": STRING_MAP}), "spec": POD_SPEC}, ["spec"])
METADATA = strict({"name": {"type": "string"}, "namespace": {"type": "string"}, "labels": STRING_MAP}, ["name"])
# The kubeflow.org/v1 TFJob fields this toolkit writes, with the operator's enums (its Go API types).
TFJOB_SCHEMA = strict(
    {
        "apiVersion": {"const": "kubeflow.org/v1"},
        "kind": {"const": "TFJob"},
        "metadata": METADATA,
        "spec": strict(
            {
                "runPolicy": strict(
                    {"cleanPodPolicy": {"enum": ["All", "Running", "None"]}, "backoffLimit": {"type": "integer"}}
                ),
                "tfReplicaSpecs": {
                    "type": "object",
                    "propertyNames": {"enum": ["Chief", "Master", "PS", "Worker", "Evaluator"]},
                    "additionalProperties": strict(
                        {
                            "replicas": {"type": "integer", "minimum": 1},
                            "restartPolicy": {"enum": ["Always", "OnFailure", "Never", "ExitCode"]},
                            "template": TEMPLATE,
                        },
                        ["replicas", "template"],
                    ),
                },
            },
            ["tfReplicaSpecs"],
        ),
    },
    ["apiVersion", "kind", "metadata", "spec"],
)
SERVICE_SCHEMA = strict(
    {
        "apiVersion": {"const": "v1"},
        "kind": {"const": "Service"},
        "metadata": METADATA,
        "spec": strict(
            {
                "clusterIP": {"const": "None"},
                "selector": STRING_MAP,
                "publishNotReadyAddresses": {"const": True},
                "ports": {"type": "array", "minItems": 1},
            },
            ["clusterIP", "selector", "ports"],
        ),
    },
    ["apiVersion", "kind", "metadata", "spec"],
)
JOB_SCHEMA = strict(
    {
        "apiVersion": {"const": "batch/v1"},
        "kind": {"const": "Job"},
        "metadata": METADATA,
        "spec": strict(
            {
                "completionMode": {"const": "Indexed"},
                "completions": {"type": "integer", "minimum": 1},
                "parallelism": {"type": "integer", "minimum": 1},
                "backoffLimit": {"type": "integer", "minimum": 0},
                "podFailurePolicy": {"type": "object", "required": ["rules"]},
                "template": TEMPLATE,
            },
            ["completionMode", "completions", "parallelism", "template"],
        ),
    },
    ["apiVersion", "kind", "metadata", "spec"],
)


def make_spec(**overrides) -> kubernetes.KubeSpec:
    settings = dict(name="mnist", image="registry.local/ps_toolkit:1", roles=(("ps", 1), ("worker", 2)))
    settings.update(overrides)
    return kubernetes.KubeSpec(**settings)


def run_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, MAKE_TFJOB, *args], capture_output=True, text=True, timeout=60)


def test_tfjob_round_trips_through_yaml_and_matches_the_schema():
    spec = make_spec(roles=(("chief", 1), ("ps", 2), ("worker", 3), ("evaluator", 1)), checkpoint_pvc="ckpt")
    manifest = kubernetes.tfjob(spec)
    (parsed,) = yaml.safe_load_all(kubernetes.to_yaml([manifest]))
    assert parsed == manifest
    jsonschema.validate(parsed, TFJOB_SCHEMA)
    replicas = parsed["spec"]["tfReplicaSpecs"]
    assert {name: r["replicas"] for name, r in replicas.items()} == {"Chief": 1, "PS": 2, "Worker": 3, "Evaluator": 1}
    assert all(r["restartPolicy"] == "OnFailure" for r in replicas.values())
    assert parsed["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"
    container = replicas["PS"]["template"]["spec"]["containers"][0]
    assert container["ports"] == [{"name": "tfjob-port", "containerPort": 2222}]
    # The operator writes TF_CONFIG itself; the NetworkPolicy fences the port, not a packet filter in the pod.
    assert container["env"] == [{"name": "PS_TOOLKIT_ALLOW_OPEN_PORTS", "value": "1"}]


def test_tfjob_against_the_operator_crd_when_given():
    path = os.environ.get(CRD_ENV)
    if not path:
        pytest.skip(f"set {CRD_ENV} to the training operator's kubeflow.org_tfjobs.yaml to check against its CRD")
    with open(path, encoding="utf-8") as handle:
        crd = yaml.safe_load(handle)
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    jsonschema.validate(kubernetes.tfjob(make_spec(restart_policy="ExitCode")), version["schema"]["openAPIV3Schema"])


def test_plain_objects_are_a_headless_service_and_one_indexed_job_per_role():
    spec = make_spec(roles=(("chief", 1), ("ps", 1), ("worker", 2), ("evaluator", 1)), checkpoint_pvc="ckpt")
    documents = list(yaml.safe_load_all(kubernetes.to_yaml(kubernetes.plain_objects(spec))))
    assert documents == kubernetes.plain_objects(spec)
    service, *jobs, policy = documents
    assert policy == kubernetes.network_policy(spec)
    jsonschema.validate(service, SERVICE_SCHEMA)
    assert service["spec"]["selector"] == {kubernetes.LABEL: "mnist"}
    assert [job["metadata"]["name"] for job in jobs] == ["mnist-chief", "mnist-ps", "mnist-worker", "mnist-evaluator"]
    for job in jobs:
        jsonschema.validate(job, JOB_SCHEMA)
        assert job["spec"]["completions"] == job["spec"]["parallelism"]
        pod = job["spec"]["template"]["spec"]
        assert pod["subdomain"] == service["metadata"]["name"] and pod["restartPolicy"] == "OnFailure"
        env = [item["name"] for item in pod["containers"][0]["env"]]
        # Kubernetes expands $(TASK_INDEX) only from variables defined before it.
        assert env == ["TASK_INDEX", "TF_CONFIG", "PS_TOOLKIT_ALLOW_OPEN_PORTS"]


@pytest.mark.parametrize("job, index", [("ps", 0), ("worker", 1), ("chief", 0), ("evaluator", 0)])
def test_plain_tf_config_uses_the_service_dns_names(job, index):
    spec = make_spec(roles=(("chief", 1), ("ps", 1), ("worker", 2), ("evaluator", 1)), cluster_domain="cluster.local")
    (manifest,) = [d for d in kubernetes.plain_objects(spec) if d["metadata"]["name"] == f"mnist-{job}"]
    template = manifest["spec"]["template"]["spec"]["containers"][0]["env"][1]["value"]
    config = ClusterConfig.from_tf_config(template.replace("$(TASK_INDEX)", str(index)))
    assert (config.task_type, config.task_index) == (job, index)
    assert config.jobs["worker"] == (
        "mnist-worker-0.mnist.default.svc.cluster.local:2222",
        "mnist-worker-1.mnist.default.svc.cluster.local:2222",
    )
    assert config.address == f"mnist-{job}-{index}.mnist.default.svc.cluster.local:2222"


def test_exit_code_policy_fails_plain_jobs_on_permanent_statuses():
    for job in kubernetes.plain_objects(make_spec(restart_policy="ExitCode"))[1:-1]:
        assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
        (rule,) = job["spec"]["podFailurePolicy"]["rules"]
        assert rule["action"] == "FailJob" and rule["onExitCodes"]["values"] == [1, 2, 3, 4, 5]
    assert (
        kubernetes.tfjob(make_spec(restart_policy="ExitCode"))["spec"]["tfReplicaSpecs"]["PS"]["restartPolicy"]
        == "ExitCode"
    )


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"name": "Mnist"}, "DNS label"),
        ({"image": " "}, "--image"),
        ({"roles": (("ps", 1),)}, "at least one worker"),
        ({"restart_policy": "Always"}, "--restart_policy"),
        ({"port": 70000}, "--port"),
    ],
)
def test_bad_specs_are_config_errors(overrides, message):
    with pytest.raises(ConfigError, match=message):
        make_spec(**overrides)


def test_yaml_strings_survive_any_content():
    tricky = ["yes", "no", "on", "null", "~", "a: b", "#x", "- y", "{z}", "'q'", '"d"', "line\nbreak", "é", "", "123"]
    document = {"values": tricky, "yes": 1, "with space": [], "nested": [{"a": [1, True, None]}, [2, 3]]}
    assert yaml.safe_load(kubernetes.to_yaml([document]).removeprefix("---\n")) == document


def test_operator_tf_config_with_cloud_environment_is_accepted():
    spec = make_spec()
    cluster = {job: [kubernetes.operator_host(spec, job, i) for i in range(n)] for job, n in (("worker", 2), ("ps", 1))}
    assert cluster["ps"] == ["mnist-ps-0.default.svc:2222"]
    text = operator_tf_config(cluster, "worker", 1)
    assert text.startswith('{"cluster":{"ps":["mnist-ps-0.default.svc:2222"],"worker":[')
    config = ClusterConfig.from_tf_config(text)
    assert (config.task_type, config.task_index, config.environment) == ("worker", 1, "cloud")
    assert config.num_ps == 1 and config.num_replicas == 2


def test_operator_master_replica_is_the_chief():
    cluster = {"master": ["mnist-master-0.default.svc:2222"], "ps": ["mnist-ps-0.default.svc:2222"]}
    config = ClusterConfig.from_tf_config(operator_tf_config(cluster, "master", 0))
    assert config.task_type == "chief" and config.is_chief


def test_operator_evaluator_tf_config_is_accepted():
    cluster = {"chief": ["mnist-chief-0.default.svc:2222"], "ps": ["mnist-ps-0.default.svc:2222"]}
    config = ClusterConfig.from_tf_config(operator_tf_config(cluster, "evaluator", 0))
    assert config.task_type == "evaluator"


def test_make_tfjob_writes_both_forms():
    tfjob = run_script("--num_ps=1", "--num_workers=2", "--image=img:1", "--train_steps=50", "--checkpoint_pvc=ck")
    assert tfjob.returncode == 0, tfjob.stderr
    manifest, policy = yaml.safe_load_all(tfjob.stdout)
    assert policy["kind"] == "NetworkPolicy"
    jsonschema.validate(manifest, TFJOB_SCHEMA)
    args = manifest["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"]
    assert args == ["--train_steps=50", "--checkpoint_dir=/checkpoints/ps-toolkit"]
    plain = run_script("--image=img:1", "--plain", "--sync_replicas")
    assert plain.returncode == 0, plain.stderr
    kinds = [d["kind"] for d in yaml.safe_load_all(plain.stdout)]
    assert kinds == ["Service", "Job", "Job", "NetworkPolicy"]


@pytest.mark.parametrize("plain", [False, True], ids=["tfjob", "plain"])
def test_the_network_policy_admits_only_the_jobs_own_pods(plain):
    """Every pod the objects create is selected by the policy, and only pods of the same job may connect."""
    spec = make_spec(roles=(("chief", 1), ("ps", 2), ("worker", 2)))
    documents = list(
        yaml.safe_load_all(
            kubernetes.to_yaml(kubernetes.plain_objects(spec) if plain else kubernetes.tfjob_objects(spec))
        )
    )
    (policy,) = [d for d in documents if d["kind"] == "NetworkPolicy"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [{"from": [{"podSelector": {"matchLabels": selector}}]}]
    assert policy["metadata"]["namespace"] == spec.namespace
    if plain:
        templates = [d["spec"]["template"] for d in documents if d["kind"] == "Job"]
    else:
        (tfjob,) = [d for d in documents if d["kind"] == "TFJob"]
        templates = [r["template"] for r in tfjob["spec"]["tfReplicaSpecs"].values()]
    assert templates and all(selector.items() <= t["metadata"]["labels"].items() for t in templates)
    other = kubernetes.network_policy(make_spec(name="other"))
    assert other["spec"]["podSelector"] != policy["spec"]["podSelector"]


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "--image is required"),
        (["--image=x", "--evaluator"], "--checkpoint_pvc"),
        (["--image=x", "--model=nope"], "--model"),
        (["--image=x", "--name=UPPER"], "DNS label"),
    ],
)
def test_make_tfjob_bad_flags_are_one_line_and_status_2(args, message):
    done = run_script(*args)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1 and not done.stdout, done.stderr
