"""Kubernetes manifests for a cluster: a Kubeflow TFJob, or a headless Service and one Indexed Job per role.

Example:
    spec = KubeSpec(name="mnist", image="registry.local/ps_toolkit:1", roles=(("ps", 1), ("worker", 2)))
    print(to_yaml([tfjob(spec)]))          # kubectl apply -f -  (needs the Kubeflow training operator)
    print(to_yaml(plain_objects(spec)))    # any Kubernetes >= 1.24
"""

from __future__ import annotations

import dataclasses
import json
import re

from ps_toolkit.base.errors import (
    EXIT_CONFIG,
    EXIT_ENVIRONMENT,
    EXIT_ORPHANED,
    EXIT_PORT_IN_USE,
    EXIT_UNEXPECTED,
    ConfigError,
)
from ps_toolkit.cluster.config import CHIEF, EVALUATOR, PS, WORKER
from ps_toolkit.network.port_guard import ALLOW_OPEN_PORTS_ENV

# Kubeflow's replica type names; the operator lowercases them for TF_CONFIG.
REPLICA_TYPES = {CHIEF: "Chief", PS: "PS", WORKER: "Worker", EVALUATOR: "Evaluator"}
DEFAULT_PORT = 2222  # the operator's default "tfjob-port"
# The operator injects TF_CONFIG only into the container with this name.
CONTAINER = "tensorflow"
RESTART_POLICIES = ("OnFailure", "ExitCode", "Never")
# The toolkit's permanent statuses (ps_toolkit/base/errors.py): a plain Job fails at once on them, never retries.
PERMANENT_EXIT_CODES = (EXIT_UNEXPECTED, EXIT_CONFIG, EXIT_ORPHANED, EXIT_PORT_IN_USE, EXIT_ENVIRONMENT)
LABEL = "ps-toolkit/cluster"
COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


@dataclasses.dataclass(frozen=True)
class KubeSpec:
    """One cluster on Kubernetes; ``validate()`` is called on construction."""

    name: str
    image: str
    roles: tuple[tuple[str, int], ...]
    command: tuple[str, ...] = ("python", "/app/scripts/run_task.py")
    task_args: tuple[str, ...] = ()
    namespace: str = "default"
    port: int = DEFAULT_PORT
    restart_policy: str = "OnFailure"
    backoff_limit: int = 3
    checkpoint_pvc: str | None = None
    checkpoint_mount: str = "/checkpoints"
    cluster_domain: str | None = None  # e.g. "cluster.local"; None: the resolver's search path finds it

    def __post_init__(self):
        object.__setattr__(self, "roles", tuple((job, count) for job, count in self.roles if count))
        self.validate()

    def validate(self) -> None:
        # Pod host names are <name>-<role>-<index>: the whole must stay a 63-character DNS label.
        if not _DNS_LABEL.match(self.name) or len(self.name) > 40:
            raise ConfigError(f"--name={self.name!r} must be a DNS label: a-z, 0-9, '-', at most 40 characters")
        if not _DNS_LABEL.match(self.namespace):
            raise ConfigError(f"--namespace={self.namespace!r} is not a valid Kubernetes namespace")
        if not self.image.strip():
            raise ConfigError("--image is empty: give the container image that holds ps_toolkit")
        if self.restart_policy not in RESTART_POLICIES:
            raise ConfigError(f"--restart_policy={self.restart_policy}; valid: {', '.join(RESTART_POLICIES)}")
        if not 1 <= self.port <= 65535:
            raise ConfigError(f"--port={self.port} is outside 1-65535")
        counts = dict(self.roles)
        if not counts.get(WORKER) and not counts.get(CHIEF):
            raise ConfigError("the cluster needs at least one worker (--num_workers) or a chief")
        if any(job not in REPLICA_TYPES or count < 0 for job, count in self.roles):
            raise ConfigError(f"bad roles {self.roles}; jobs are {', '.join(REPLICA_TYPES)} with counts >= 0")
        if counts.get(CHIEF, 0) > 1 or counts.get(EVALUATOR, 0) > 1:
            raise ConfigError("at most one chief and one evaluator")


def network_policy(spec: KubeSpec) -> dict:
    """Admits traffic to the job's pods only from the job's own pods (every port: gRPC has no authentication).

    Enforced by the cluster's network plugin (Calico, Cilium, ...); a cluster
    without one accepts the object and enforces nothing (docs/deploy.md).
    """
    own_pods = {"matchLabels": {LABEL: spec.name}}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": f"{spec.name}-cluster-only", "namespace": spec.namespace, "labels": {LABEL: spec.name}},
        "spec": {
            "podSelector": own_pods,
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": own_pods}]}],
        },
    }


def tfjob_objects(spec: KubeSpec) -> list[dict]:
    """The TFJob and the NetworkPolicy that fences its pods."""
    return [tfjob(spec), network_policy(spec)]


def operator_host(spec: KubeSpec, job: str, index: int) -> str:
    """The address the Kubeflow operator gives a task: its own Service, <name>-<job>-<index>.<namespace>.svc."""
    domain = f".{spec.cluster_domain}" if spec.cluster_domain else ""
    return f"{spec.name}-{job}-{index}.{spec.namespace}.svc{domain}:{spec.port}"


def tfjob(spec: KubeSpec) -> dict:
    """A kubeflow.org/v1 TFJob: the operator creates the pods and services and writes TF_CONFIG."""
    replica_specs = {}
    for job, count in spec.roles:
        replica_specs[REPLICA_TYPES[job]] = {
            "replicas": count,
            "restartPolicy": spec.restart_policy,
            "template": {
                "metadata": {"labels": {LABEL: spec.name}},
                "spec": pod_spec(spec, env=[]),
            },
        }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": spec.name, "namespace": spec.namespace, "labels": {LABEL: spec.name}},
        "spec": {
            # Running: once the job succeeds, the parameter-server pods still up are deleted.
            "runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": spec.backoff_limit},
            "tfReplicaSpecs": replica_specs,
        },
    }


def plain_host(spec: KubeSpec, job: str, index: int) -> str:
    """An Indexed Job's pod is <job name>-<index>, reachable as such under the headless Service."""
    domain = f".{spec.cluster_domain}" if spec.cluster_domain else ""
    return f"{spec.name}-{job}-{index}.{spec.name}.{spec.namespace}.svc{domain}:{spec.port}"


def plain_tf_config(spec: KubeSpec, job: str, index: str = "$(TASK_INDEX)") -> str:
    """TF_CONFIG of one role; Kubernetes expands $(TASK_INDEX) from the pod's completion index."""
    cluster = {role: [plain_host(spec, role, i) for i in range(count)] for role, count in spec.roles}
    # Unlike the operator, keep the evaluator in the cluster: the toolkit then knows it, and ignores it in training.
    text = json.dumps({"cluster": cluster, "task": {"type": job, "index": "<index>"}})
    return text.replace('"<index>"', index)  # a bare number once expanded


def plain_objects(spec: KubeSpec) -> list[dict]:
    """A headless Service and one Indexed Job per role, for clusters without the Kubeflow operator."""
    return [
        _headless_service(spec),
        *(_indexed_job(spec, job, count) for job, count in spec.roles),
        network_policy(spec),
    ]


def _headless_service(spec: KubeSpec) -> dict:
    """The Service whose name is every pod's subdomain, so peers resolve as <pod>.<service>.<namespace>.svc."""
    labels = {LABEL: spec.name}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": spec.name, "namespace": spec.namespace, "labels": labels},
        "spec": {
            "clusterIP": "None",
            "selector": labels,
            # Peers must resolve each other while they start, before any pod is "ready".
            "publishNotReadyAddresses": True,
            "ports": [{"name": "grpc", "port": spec.port, "targetPort": spec.port}],
        },
    }


def _indexed_job(spec: KubeSpec, job: str, count: int) -> dict:
    """One role's Indexed Job: a pod per task, each knowing its index from its completion index."""
    labels = {LABEL: spec.name}
    env = [
        {"name": "TASK_INDEX", "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX}}},
        {"name": "TF_CONFIG", "value": plain_tf_config(spec, job)},
    ]
    pod = pod_spec(spec, env=env)
    pod["subdomain"] = spec.name  # with the Service of that name: <pod>.<service>.<namespace>.svc
    pod["restartPolicy"] = "OnFailure" if spec.restart_policy == "OnFailure" else "Never"
    job_spec = {
        "completionMode": "Indexed",
        "completions": count,
        "parallelism": count,
        "backoffLimit": spec.backoff_limit if spec.restart_policy != "Never" else 0,
        "template": {"metadata": {"labels": dict(labels, **{"ps-toolkit/role": job})}, "spec": pod},
    }
    if spec.restart_policy == "ExitCode":
        # Kubeflow's ExitCode policy for plain Jobs: permanent statuses fail the Job, others retry.
        job_spec["podFailurePolicy"] = {
            "rules": [
                {
                    "action": "FailJob",
                    "onExitCodes": {"containerName": CONTAINER, "operator": "In", "values": list(PERMANENT_EXIT_CODES)},
                }
            ]
        }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"{spec.name}-{job}", "namespace": spec.namespace, "labels": labels},
        "spec": job_spec,
    }


def pod_spec(spec: KubeSpec, env: list) -> dict:
    """One task's pod: the ``tensorflow`` container, its port, ``env`` and the checkpoint volume."""
    args = list(spec.task_args)
    container = {
        "name": CONTAINER,
        "image": spec.image,
        "command": list(spec.command),
        "args": args,
        "ports": [{"name": "tfjob-port", "containerPort": spec.port}],
    }
    # The NetworkPolicy, not a packet filter inside the (unprivileged) container, keeps the port to the job.
    container["env"] = [*env, {"name": ALLOW_OPEN_PORTS_ENV, "value": "1"}]
    pod = {"containers": [container]}
    if spec.checkpoint_pvc:
        container["volumeMounts"] = [{"name": "checkpoints", "mountPath": spec.checkpoint_mount}]
        pod["volumes"] = [{"name": "checkpoints", "persistentVolumeClaim": {"claimName": spec.checkpoint_pvc}}]
    return pod


# YAML 1.1 readers (PyYAML, older kubectl) take these bare words for booleans or null.
_YAML_SPECIAL = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"}
_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-/]*$")


def to_yaml(documents: list[dict]) -> str:
    """Block-style YAML of plain data; every string is double-quoted (JSON quoting is valid YAML)."""
    return "".join("---\n" + "\n".join(_yaml_lines(doc, 0)) + "\n" for doc in documents)


def _yaml_key(key: str) -> str:
    return key if _PLAIN_KEY.match(key) and key.lower() not in _YAML_SPECIAL else json.dumps(key)


def _yaml_lines(value, indent: int) -> list[str]:
    pad = " " * indent
    lines = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                lines.append(f"{pad}{_yaml_key(key)}:")
                lines.extend(_yaml_lines(item, indent + 2))
            else:
                lines.append(f"{pad}{_yaml_key(key)}: {json.dumps(item)}")
    else:
        for item in value:
            if isinstance(item, (dict, list)) and item:
                nested = _yaml_lines(item, indent + 2)
                lines.append(f"{pad}- {nested[0].lstrip()}")
                lines.extend(nested[1:])
            else:
                lines.append(f"{pad}- {json.dumps(item)}")
    return lines


def write_manifests(options: None, settings: dict) -> str:
    """The ``kubernetes`` backend (backends.registry): the YAML of the job's objects.

    Args:
      options: unused (the cluster's own scheduler runs the job).
      settings: ``{"spec": KubeSpec, "plain": bool}``; plain: Services and indexed Jobs instead of a TFJob.

    Returns:
      The manifests as one YAML text.
    """
    del options
    spec = settings["spec"]
    return to_yaml(plain_objects(spec) if settings.get("plain") else tfjob_objects(spec))
