"""How many Ray CPUs and GPUs a job asks for, the Ray of a launch's own sized to hold it, and the flags that fit.

Ray's CPUs are its bookkeeping, not cores: a Ray the launch starts itself gets
at least the logical CPUs its job asks for, so the default job (one CPU per
task) runs on a machine of fewer cores. When a cluster cannot hold the job,
``fitting_flags`` names the per-task requests that would fit its free CPUs.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping, Sequence

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.cluster.config import PS

# The smallest request per task the suggestions go down to (Ray refuses a bundle of nothing).
_MIN_TASK_CPUS = 0.01


@dataclasses.dataclass(frozen=True)
class JobRequest:
    """What the job's tasks ask of Ray in all: ``bundles`` (one per permanent task), ``floating`` elastic
    workers that each ask ``floating_bundle`` while they run."""

    bundles: tuple[Mapping[str, float], ...]
    floating: int = 0
    floating_bundle: Mapping[str, float] = dataclasses.field(default_factory=dict)

    def total(self, resource: str) -> float:
        """The job's whole request of ``resource`` (CPU, GPU) when every task runs."""
        permanent = sum(bundle.get(resource, 0.0) for bundle in self.bundles)
        return permanent + self.floating * self.floating_bundle.get(resource, 0.0)

    @property
    def num_tasks(self) -> int:
        return len(self.bundles) + self.floating


def own_ray_cpus(request: JobRequest, asked: int | None) -> int:
    """The logical CPUs of the Ray a launch starts itself: ``asked`` (--ray_num_cpus) if it holds the job,
    else at least the job's CPUs and the machine's cores. Raises ConfigError (at once) when ``asked`` is
    too few."""
    needed = math.ceil(request.total("CPU") - 1e-9)
    if asked is None:
        return max(os.cpu_count() or 1, needed)
    if asked < needed:
        raise ConfigError(
            f"--ray_num_cpus={asked} cannot hold the job: its {request.num_tasks} tasks ask for "
            f"{request.total('CPU'):g} CPUs; give --ray_num_cpus={needed} or more, or leave it out "
            f"(the launch's Ray is then sized to the job), or {fitting_flags(asked, request)}"
        )
    return asked


def check_own_gpus(request: JobRequest, cluster_gpus: float) -> None:
    """A Ray of the launch's own has the machine's GPUs only: a job asking for more fails at once."""
    needed = request.total("GPU")
    if needed > cluster_gpus + 1e-9:
        raise ConfigError(
            f"this machine's Ray has {cluster_gpus:g} GPUs and the job's tasks ask for {needed:g} "
            f"(--ray_worker_gpus); give --ray_worker_gpus={_share(cluster_gpus, _gpu_tasks(request))} or less, "
            "or --address of a cluster with GPUs"
        )


def fitting_flags(free_cpus: float, request: JobRequest) -> str:
    """The per-task CPU flags under which the job's tasks fit ``free_cpus`` in all."""
    share = _share(free_cpus, request.num_tasks)
    if share < _MIN_TASK_CPUS:
        return f"no per-task request fits {free_cpus:g} free CPUs for {request.num_tasks} tasks: add nodes"
    return f"--ray_ps_cpus={share} --ray_worker_cpus={share} (at most {free_cpus:g} CPUs in all)"


def placement_refusal(address: str, request: JobRequest, wait_secs: float, free: Mapping[str, float]) -> str:
    """Why a cluster did not place the job's bundles in ``wait_secs``, with the flags that would fit."""
    bundles = list(request.bundles)
    return (
        f"the Ray cluster at {address} cannot hold the job: {len(bundles)} bundles {bundles} not placed within "
        f"{wait_secs:g}s (free: {dict(free)}); ask for less: {fitting_flags(free.get('CPU', 0.0), request)}, "
        "or add nodes"
    )


def job_request(jobs: Sequence[str], floating: int, bundle_of) -> JobRequest:
    """The request of permanent tasks of ``jobs`` and ``floating`` elastic workers; ``bundle_of(job)`` is
    one task's bundle."""
    worker = next((job for job in jobs if job != PS), "worker")
    return JobRequest(tuple(bundle_of(job) for job in jobs), floating, bundle_of(worker) if floating else {})


def _gpu_tasks(request: JobRequest) -> int:
    return sum(1 for bundle in request.bundles if bundle.get("GPU")) + (
        request.floating if request.floating_bundle.get("GPU") else 0
    )


def _share(total: float, tasks: int) -> float:
    """``total`` split over ``tasks``, rounded down to hundredths."""
    return math.floor(total * 100 / max(tasks, 1)) / 100
