"""A Volcano Job (batch.volcano.sh/v1alpha1) for a cluster: gang-scheduled, TF_CONFIG from its tensorflow plugin.

Example:
    spec = KubeSpec(name="mnist", image="registry.local/ps_toolkit:1", roles=(("ps", 1), ("worker", 2)))
    print(to_yaml(volcano_objects(spec)))    # kubectl apply -f -  (needs Volcano's scheduler and controllers)

Volcano's ``tensorflow`` plugin writes each pod's TF_CONFIG from the Job's
tasks, matched by name (ps, worker, chief, evaluator: its defaults) with every
host ``<job>-<task>-<index>.<job>:<port>``; its ``svc`` plugin makes the headless
Service of that name (and, unless disabled, a NetworkPolicy of its own). The
Job is gang-scheduled (``minAvailable``: every task), so no task starts and
waits for peers that cannot be placed.
"""

from __future__ import annotations

from ps_toolkit.backends.kubernetes import LABEL, PERMANENT_EXIT_CODES, KubeSpec, network_policy, pod_spec, to_yaml

API_VERSION = "batch.volcano.sh/v1alpha1"
SCHEDULER = "volcano"


def volcano_host(spec: KubeSpec, job: str, index: int) -> str:
    """The address Volcano's tensorflow plugin gives a task: <name>-<task>-<index>.<name>:<port>."""
    return f"{spec.name}-{job}-{index}.{spec.name}:{spec.port}"


def volcano_objects(spec: KubeSpec) -> list[dict]:
    """The Volcano Job and the NetworkPolicy that fences its pods (as for the TFJob)."""
    return [volcano_job(spec), network_policy(spec)]


def volcano_job(spec: KubeSpec) -> dict:
    """One Volcano Job with a task per role; Volcano restarts a failed pod, or the Job, as the policy says."""
    tasks = []
    for job, count in spec.roles:
        pod = pod_spec(spec, env=[])
        pod["restartPolicy"] = "OnFailure" if spec.restart_policy == "OnFailure" else "Never"
        template = {"metadata": {"labels": {LABEL: spec.name, "ps-toolkit/role": job}}, "spec": pod}
        tasks.append({"name": job, "replicas": count, "template": template})
    job_spec = {
        "schedulerName": SCHEDULER,
        "minAvailable": sum(count for _, count in spec.roles),
        "maxRetry": spec.backoff_limit,
        "plugins": {"tensorflow": [f"--port={spec.port}"], "svc": []},
        "policies": _policies(spec),
        "tasks": tasks,
    }
    return {
        "apiVersion": API_VERSION,
        "kind": "Job",
        "metadata": {"name": spec.name, "namespace": spec.namespace, "labels": {LABEL: spec.name}},
        "spec": job_spec,
    }


def _policies(spec: KubeSpec) -> list[dict]:
    """An evicted pod restarts the Job (its peers' addresses stay); ExitCode: a permanent status aborts it."""
    policies = [{"event": "PodEvicted", "action": "RestartJob"}]
    if spec.restart_policy == "ExitCode":
        policies += [{"exitCode": code, "action": "AbortJob"} for code in PERMANENT_EXIT_CODES]
        policies.append({"event": "PodFailed", "action": "RestartJob"})
    elif spec.restart_policy == "Never":
        policies.append({"event": "PodFailed", "action": "AbortJob"})
    return policies


def write_manifests(options: None, settings: dict) -> str:
    """The ``volcano`` backend (backends.registry): the YAML of the Volcano Job and its network policy.

    Args:
      options: unused (Volcano's scheduler runs the job).
      settings: ``{"spec": KubeSpec}``.

    Returns:
      The manifests as one YAML text.
    """
    del options
    return to_yaml(volcano_objects(settings["spec"]))
