"""What each task of a local cluster runs: its address, command line and environment.

A local cluster is given either as counts (ports are then reserved here, on
loopback) or as explicit host lists. Every task gets the classic cluster flags
(``--ps_hosts=... --job_name=... --task_index=...``) appended to its command
AND ``TF_CONFIG`` in its environment, so flag-style and TF_CONFIG-style
scripts both run unchanged. ``task_args`` changes the flags: ``none`` gives
TF_CONFIG alone, a template (``--task_mode={job} --task_id={index}``) the names
a script chose. ``chief_role="master"`` names the chief "master" in both, as
Cloud ML Engine and TF 1.x's estimator did. The flags appended are also in
``CLUSTER_ARGS_ENV`` (a JSON list), so run_legacy.py can keep them from breaking a
script that does not define them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import string
import sys
from collections.abc import Mapping, Sequence

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.base.progress_lines import CLUSTER_ARGS_ENV
from ps_toolkit.cluster.addresses import parse_host_list
from ps_toolkit.cluster.config import CHIEF, EVALUATOR, PS, WORKER, ClusterConfig
from ps_toolkit.process import task_entries

LOCALHOST = "localhost"
# Jobs in the order their tasks are started: servers first.
START_ORDER = (PS, CHIEF, WORKER, EVALUATOR)
# More tasks than this on one machine is not a local cluster (each is a TensorFlow process).
MAX_LOCAL_TASKS = 256
CHIEF_ROLES = (CHIEF, "master")
# --task_args=none: no flags, TF_CONFIG alone.
NO_TASK_ARGS = "none"
TASK_ARG_FIELDS = ("job", "index", "address", "ps_hosts", "worker_hosts", "chief_hosts", "evaluator_hosts")


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
    """The default task entry (task_entries: the toolkit's run_task) with the given training flags: its script
    in a checkout, ``python -m`` its module when installed without one."""
    entry = task_entries.default_entry()
    if os.path.isfile(entry.script):
        return [sys.executable, entry.script, *train_args]
    return [sys.executable, "-m", entry.module, *train_args]


def check_task_args(task_args: str | None) -> None:
    """ConfigError for a --task_args template with a field the launcher cannot fill or bad quoting."""
    if task_args is None or task_args == NO_TASK_ARGS:
        return
    try:
        fields = [name for _, name, _, _ in string.Formatter().parse(task_args) if name is not None]
        shlex.split(task_args)
    except ValueError as err:
        raise ConfigError(f"--task_args={task_args!r}: {err}") from None
    unknown = [name for name in fields if name not in TASK_ARG_FIELDS]
    if unknown:
        raise ConfigError(
            f"--task_args={task_args!r} names {{{unknown[0]}}}; the fields are {', '.join(TASK_ARG_FIELDS)}"
        )


def _role(job: str, chief_role: str) -> str:
    return chief_role if job == CHIEF else job


def _tf_config(task: ClusterConfig, chief_role: str) -> str:
    payload = json.loads(task.tf_config())
    payload["cluster"] = {_role(job, chief_role): hosts for job, hosts in payload["cluster"].items()}
    payload["task"]["type"] = _role(payload["task"]["type"], chief_role)
    return json.dumps(payload)


def _task_flags(task: ClusterConfig, chief_role: str, task_args: str | None) -> list[str]:
    hosts = {f"{job}_hosts": ",".join(task.jobs.get(job, ())) for job in (CHIEF, WORKER, PS, EVALUATOR)}
    if task_args == NO_TASK_ARGS:
        return []
    if task_args is not None:
        role = _role(task.task_type, chief_role)
        return shlex.split(task_args.format(job=role, index=task.task_index, address=task.address, **hosts))
    flags = [f"--{_role(job, chief_role)}_hosts={','.join(hosts)}" for job, hosts in task.jobs.items()]
    return flags + [f"--job_name={_role(task.task_type, chief_role)}", f"--task_index={task.task_index}"]


def plan_tasks(
    jobs: Mapping[str, Sequence[str]],
    command: Sequence[str],
    *,
    base_env: Mapping[str, str],
    chief_role: str = CHIEF,
    task_args: str | None = None,
) -> list[TaskPlan]:
    """One TaskPlan per task, servers first: ``command`` + cluster flags, TF_CONFIG set (see the module)."""
    if chief_role not in CHIEF_ROLES:
        raise ConfigError(f"--chief_role_name={chief_role!r}; valid: {', '.join(CHIEF_ROLES)}")
    check_task_args(task_args)
    cluster = ClusterConfig(jobs=jobs, task_type=next(iter(jobs)), task_index=0, source="launcher")
    plans = []
    for job in START_ORDER:
        for index, address in enumerate(jobs.get(job, ())):
            task = cluster.for_task(job, index)
            flags = _task_flags(task, chief_role, task_args)
            env = dict(base_env, TF_CONFIG=_tf_config(task, chief_role))
            env[CLUSTER_ARGS_ENV] = json.dumps(flags)
            plans.append(TaskPlan(job, index, address, (*command, *flags), env))
    return plans


def task_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a task: unbuffered output, extra values on top."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"  # progress lines reach the launcher as they are printed
    env.pop("TF_CONFIG", None)
    env.pop(CLUSTER_ARGS_ENV, None)  # an outer launch's: this launch sets each task's own
    env.update(extra or {})
    return env
