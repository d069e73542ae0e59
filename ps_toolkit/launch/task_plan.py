"""What each task of a local cluster runs: its address, command line and environment.

A local cluster is given either as counts (ports are then reserved here, on
loopback) or as explicit host lists. Every task gets the classic cluster flags
(``--ps_hosts=... --job_name=... --task_index=...``) appended to its command
AND ``TF_CONFIG`` in its environment, so flag-style and TF_CONFIG-style
scripts both run unchanged.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping, Sequence

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.cluster.config import CHIEF, EVALUATOR, PS, WORKER, ClusterConfig, parse_host_list
from ps_toolkit.process.fork_client import RUN_TASK_MODULE, RUN_TASK_SCRIPT  # the per-task entry point

LOCALHOST = "localhost"
# Jobs in the order their tasks are started: servers first.
START_ORDER = (PS, CHIEF, WORKER, EVALUATOR)
# More tasks than this on one machine is not a local cluster (each is a TensorFlow process).
MAX_LOCAL_TASKS = 256


@dataclasses.dataclass(frozen=True)
class Topology:
    """How many tasks of each job; ``hosts`` replaces the counts when given.

    Example:
        Topology(num_ps=1, num_workers=2).jobs_for_ports([9001, 9002, 9003])
        # {'ps': ('localhost:9001',), 'worker': ('localhost:9002', 'localhost:9003')}
    """

    num_ps: int = 1
    num_workers: int = 2
    chief: bool = False
    evaluator: bool = False
    hosts: Mapping[str, tuple[str, ...]] | None = None

    def __post_init__(self):
        if self.hosts is None:
            if self.num_ps < 0 or self.num_workers < 0:
                raise ConfigError(f"--num_ps={self.num_ps} and --num_workers={self.num_workers} must be >= 0")
            total = self.num_ps + self.num_workers
            if total > MAX_LOCAL_TASKS:
                raise ConfigError(
                    f"--num_ps={self.num_ps} and --num_workers={self.num_workers}: {total} tasks, more than "
                    f"{MAX_LOCAL_TASKS} on one machine (each is a TensorFlow process of about 0.5 GiB)"
                )
            if self.num_workers + int(self.chief) < 1:
                raise ConfigError("--num_workers=0 without --chief: a cluster needs at least one replica")
        else:
            # Build a config once so a bad host list fails here, with its flag name.
            ClusterConfig(jobs=self.hosts, task_type=next(iter(self.hosts)), task_index=0, source="--*_hosts")

    @property
    def explicit(self) -> bool:
        return self.hosts is not None

    @property
    def num_tasks(self) -> int:
        if self.hosts is not None:
            return sum(len(h) for h in self.hosts.values())
        return self.num_ps + self.num_workers + int(self.chief) + int(self.evaluator)

    def jobs_for_ports(self, ports: Sequence[int]) -> dict[str, tuple[str, ...]]:
        """The cluster's jobs: the explicit hosts, or loopback addresses on ``ports``."""
        if self.hosts is not None:
            return {job: tuple(hosts) for job, hosts in self.hosts.items()}
        counts = {CHIEF: int(self.chief), WORKER: self.num_workers, PS: self.num_ps, EVALUATOR: int(self.evaluator)}
        if len(ports) != sum(counts.values()):
            raise ValueError(f"{len(ports)} ports for {sum(counts.values())} tasks")
        free = iter(ports)
        return {job: tuple(f"{LOCALHOST}:{next(free)}" for _ in range(n)) for job, n in counts.items() if n}


def hosts_from_flags(*, ps_hosts: str, worker_hosts: str, chief_hosts: str, evaluator_hosts: str) -> dict:
    """Explicit host lists from --*_hosts flags (empty ones left out)."""
    given = {CHIEF: chief_hosts, WORKER: worker_hosts, PS: ps_hosts, EVALUATOR: evaluator_hosts}
    return {job: parse_host_list(text, f"--{job}_hosts") for job, text in given.items() if text}


@dataclasses.dataclass(frozen=True)
class TaskPlan:
    """One task: who it is, where it listens, what it runs."""

    job: str
    index: int
    address: str
    argv: tuple[str, ...]
    env: Mapping[str, str]

    @property
    def name(self) -> str:
        return f"{self.job}:{self.index}"


def default_command(train_args: Sequence[str] = ()) -> list[str]:
    """``python scripts/run_task.py`` with the given training flags; installed without a checkout,
    ``python -m ps_toolkit.tools.run_task``."""
    if os.path.isfile(RUN_TASK_SCRIPT):
        return [sys.executable, RUN_TASK_SCRIPT, *train_args]
    return [sys.executable, "-m", RUN_TASK_MODULE, *train_args]


def plan_tasks(
    jobs: Mapping[str, Sequence[str]],
    command: Sequence[str],
    *,
    base_env: Mapping[str, str],
) -> list[TaskPlan]:
    """One TaskPlan per task, servers first: ``command`` + cluster flags, TF_CONFIG set."""
    cluster = ClusterConfig(jobs=jobs, task_type=next(iter(jobs)), task_index=0, source="launcher")
    plans = []
    for job in START_ORDER:
        for index, address in enumerate(jobs.get(job, ())):
            task = cluster.for_task(job, index)
            env = dict(base_env, TF_CONFIG=task.tf_config())
            plans.append(TaskPlan(job, index, address, (*command, *task.host_flags()), env))
    return plans


def task_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a task: unbuffered output, extra values on top."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"  # progress lines reach the launcher as they are printed
    env.pop("TF_CONFIG", None)
    env.update(extra or {})
    return env
