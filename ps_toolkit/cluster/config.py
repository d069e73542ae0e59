"""The cluster as data: jobs, tasks and addresses, parsed and validated at the edge.

A ``ClusterConfig`` is built from host-list flags, from ``TF_CONFIG`` or from a
JSON cluster file, and is checked before any server starts: a bad cluster
never reaches TensorFlow. Every error names the bad value and its source.
This module imports no TensorFlow session code.
"""

from __future__ import annotations

import dataclasses
import json
import types
from collections.abc import Mapping

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.cluster.addresses import parse_host_list, split_address
from ps_toolkit.cluster.tf_config import clip as _clip
from ps_toolkit.cluster.tf_config import parse_tf_config

CHIEF, WORKER, PS, EVALUATOR = "chief", "worker", "ps", "evaluator"
JOB_NAMES = (CHIEF, WORKER, PS, EVALUATOR)
# Jobs whose tasks run training steps; the evaluator only reads checkpoints and
# is kept out of the servers' ClusterSpec, as tf.estimator did.
TRAINING_JOBS = (CHIEF, WORKER, PS)
# Kubeflow's first TFJob operator and the estimator era called the chief "master".
JOB_ALIASES = {"master": CHIEF}
# Set by a launcher whose workers come and go (ps_toolkit/backends/ray/elastic.py): the worker index from
# which the cluster's workers are elastic. A ps waits for the done tokens of the workers below it only.
ELASTIC_WORKERS_FROM_ENV = "PS_TOOLKIT_ELASTIC_WORKERS_FROM"

# The textbook localhost cluster: 1 ps + 2 workers on ports 2222-2224.
DEFAULT_PS_HOSTS = "localhost:2222"
DEFAULT_WORKER_HOSTS = "localhost:2223,localhost:2224"


@dataclasses.dataclass(frozen=True)
class ClusterConfig:
    """A validated cluster and the task this process plays in it.

    Example:
        config = ClusterConfig.from_host_flags(
            ps_hosts="localhost:2222", worker_hosts="localhost:2223,localhost:2224",
            job_name="worker", task_index=1)
        config.is_chief        # False: worker 0 is the chief when there is no chief job
        config.device          # '/job:worker/task:1'
    """

    jobs: Mapping[str, tuple[str, ...]]
    task_type: str
    task_index: int
    source: str = "flags"
    environment: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "jobs", types.MappingProxyType(dict(self.jobs)))
        _validate(self)

    # Who this task is.
    @property
    def device(self) -> str:
        """This task's device name, ``/job:<type>/task:<index>``."""
        return f"/job:{self.task_type}/task:{self.task_index}"

    @property
    def address(self) -> str:
        """This task's host:port."""
        return self.jobs[self.task_type][self.task_index]

    @property
    def chief_task(self) -> tuple[str, int]:
        """The task that initializes, checkpoints and writes summaries."""
        return (CHIEF, 0) if CHIEF in self.jobs else (WORKER, 0)

    @property
    def is_chief(self) -> bool:
        """Whether this task is the chief (``chief_task``)."""
        return (self.task_type, self.task_index) == self.chief_task

    @property
    def is_replica(self) -> bool:
        """True for tasks that run training steps (chief and workers)."""
        return self.task_type in (CHIEF, WORKER)

    # The shape of the cluster.
    @property
    def num_ps(self) -> int:
        """The number of parameter servers."""
        return len(self.jobs.get(PS, ()))

    @property
    def num_replicas(self) -> int:
        """Training replicas: the chief task, if any, plus the workers."""
        return len(self.jobs.get(CHIEF, ())) + len(self.jobs.get(WORKER, ()))

    @property
    def replica_index(self) -> int:
        """This task's position among the replicas: the chief is 0."""
        if self.task_type == CHIEF:
            return 0
        if self.task_type == WORKER:
            return self.task_index + len(self.jobs.get(CHIEF, ()))
        raise ValueError(f"task {self.device} is not a training replica")

    def replica_tasks(self) -> list[tuple[str, int]]:
        """(job, index) of every replica, chief first."""
        return [(job, i) for job in (CHIEF, WORKER) for i in range(len(self.jobs.get(job, ())))]

    def training_jobs(self) -> dict[str, list[str]]:
        """The jobs that go into the servers' ClusterSpec (no evaluator)."""
        return {job: list(hosts) for job, hosts in self.jobs.items() if job in TRAINING_JOBS}

    def cluster_spec(self):
        """The tf.train.ClusterSpec of the training jobs."""
        import tensorflow as tf

        return tf.train.ClusterSpec(self.training_jobs())

    def for_task(self, task_type: str, task_index: int) -> ClusterConfig:
        """The same cluster, seen from another task."""
        return dataclasses.replace(self, task_type=task_type, task_index=task_index)

    def tf_config(self) -> str:
        """This cluster and task as a TF_CONFIG JSON string."""
        payload = {
            "cluster": {job: list(hosts) for job, hosts in self.jobs.items()},
            "task": {"type": self.task_type, "index": self.task_index},
        }
        if self.environment:
            payload["environment"] = self.environment
        return json.dumps(payload)

    def host_flags(self) -> list[str]:
        """This cluster and task as the classic --ps_hosts/... command-line flags."""
        flags = [f"--{job}_hosts={','.join(hosts)}" for job, hosts in self.jobs.items()]
        return flags + [f"--job_name={self.task_type}", f"--task_index={self.task_index}"]

    # Sources.
    @classmethod
    def from_host_flags(
        cls,
        *,
        ps_hosts: str | None,
        worker_hosts: str | None,
        chief_hosts: str | None = None,
        evaluator_hosts: str | None = None,
        job_name: str | None,
        task_index: int | None,
        source: str = "flags",
    ) -> ClusterConfig:
        """Builds a cluster from --ps_hosts/--worker_hosts/... and --job_name/--task_index."""
        given = {CHIEF: chief_hosts, WORKER: worker_hosts, PS: ps_hosts, EVALUATOR: evaluator_hosts}
        jobs = {job: parse_host_list(text, f"--{job}_hosts") for job, text in given.items() if text}
        if job_name is None:
            raise ConfigError(f"--job_name is not set (from {source}); one of {', '.join(JOB_NAMES)}")
        return cls(
            jobs=jobs,
            task_type=_job_name(job_name, "--job_name"),
            task_index=_task_index(task_index, "--task_index"),
            source=source,
        )

    @classmethod
    def from_tf_config(cls, text: str, source: str = "TF_CONFIG") -> ClusterConfig:
        """Builds a cluster from a TF_CONFIG JSON string (estimator, Kubeflow)."""
        return cls.from_dict(parse_tf_config(text, source), source)

    @classmethod
    def from_cluster_file(cls, path: str, job_name=None, task_index=None) -> ClusterConfig:
        """Builds a cluster from a JSON file with a 'cluster' map and optional 'task'."""
        source = f"cluster file {path}"
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as err:
            raise ConfigError(f"cannot read {source}: {err.strerror}") from None
        except UnicodeDecodeError as err:
            raise ConfigError(
                f"{source} is not UTF-8 text (byte {err.object[err.start]:#04x} at offset {err.start})"
            ) from None
        try:
            payload = json.loads(text)
        except ValueError as err:
            raise ConfigError(f"{source} is not valid JSON ({err.args[0]})") from None
        if isinstance(payload, dict) and "cluster" not in payload:
            payload = {"cluster": payload}  # a bare {"ps": [...], "worker": [...]} map
        if isinstance(payload, dict) and job_name is not None:
            payload = dict(payload, task={"type": job_name, "index": task_index or 0})
        return cls.from_dict(payload, source)

    @classmethod
    def from_dict(cls, payload, source: str) -> ClusterConfig:
        """Builds a cluster from a parsed TF_CONFIG-shaped object (``cluster``, ``task``, ``environment``).

        Args:
            payload: The object.
            source: Where it came from, for messages.

        Returns:
            The validated cluster.

        Raises:
            ConfigError: a payload that is not such an object or names a bad cluster or task.
        """
        if not isinstance(payload, dict):
            raise ConfigError(f"{source} must be a JSON object, got {_clip(payload)}")
        cluster = payload.get("cluster")
        if not isinstance(cluster, dict) or not cluster:
            raise ConfigError(f"{source} has no 'cluster' object: {_clip(payload)}")
        task = payload.get("task")
        if not isinstance(task, dict) or "type" not in task:
            raise ConfigError(f"{source} has no 'task' with a 'type': {_clip(payload)}")
        jobs = {}
        for job, hosts in cluster.items():
            name = _job_name(job, f"{source} cluster")
            where = f"{source} cluster.{job}"
            if isinstance(hosts, str):
                hosts = [hosts]
            if not isinstance(hosts, list) or not hosts:
                raise ConfigError(f"{where} must be a non-empty list of host:port, got {_clip(hosts)}")
            if any(not isinstance(h, str) for h in hosts):
                raise ConfigError(f"{where} has a non-string entry: {_clip(hosts)}")
            joined = next((i for i, h in enumerate(hosts) if "," in h), None)
            if joined is not None:  # one entry is one task's address, as in TensorFlow's ClusterSpec
                raise ConfigError(f"{where}[{joined}] is {hosts[joined]!r}: one host:port per entry, not a list")
            jobs[name] = parse_host_list(",".join(hosts), where)
        environment = payload.get("environment")
        return cls(
            jobs=jobs,
            task_type=_job_name(task["type"], f"{source} task.type"),
            task_index=_task_index(task.get("index", 0), f"{source} task.index"),
            source=source,
            environment=environment if isinstance(environment, str) else None,
        )


def resolve(
    *,
    ps_hosts=None,
    worker_hosts=None,
    chief_hosts=None,
    evaluator_hosts=None,
    job_name=None,
    task_index=None,
    cluster_file=None,
    tf_config=None,
) -> ClusterConfig:
    """Picks the cluster source a task was given and checks the sources agree.

    TF_CONFIG or a cluster file give the cluster; host flags given beside them
    must name the same cluster and task. With neither and no host flags, the
    textbook localhost cluster (1 ps + 2 workers, ports 2222-2224) is used.

    Args:
        ps_hosts: ``--ps_hosts``, a comma-separated host:port list.
        worker_hosts: ``--worker_hosts``.
        chief_hosts: ``--chief_hosts``.
        evaluator_hosts: ``--evaluator_hosts``.
        job_name: This task's job.
        task_index: This task's index in its job.
        cluster_file: A JSON file with a TF_CONFIG-shaped ``cluster`` (or a bare job map).
        tf_config: The TF_CONFIG JSON text.

    Returns:
        The validated cluster and this task's role in it.

    Raises:
        ConfigError: a bad value, or sources that disagree, naming the value and its source.
    """
    any_hosts = any((ps_hosts, worker_hosts, chief_hosts, evaluator_hosts))
    if tf_config and tf_config.strip() and cluster_file:
        raise ConfigError(f"both TF_CONFIG and --cluster_file={cluster_file} are set; give one")
    if tf_config and tf_config.strip():
        config = ClusterConfig.from_tf_config(tf_config)
    elif cluster_file:
        config = ClusterConfig.from_cluster_file(cluster_file, job_name, task_index)
    else:
        if not any_hosts:
            ps_hosts, worker_hosts = DEFAULT_PS_HOSTS, DEFAULT_WORKER_HOSTS
        elif not worker_hosts and not chief_hosts:
            raise ConfigError("--worker_hosts is empty: a cluster needs at least one worker")
        return ClusterConfig.from_host_flags(
            ps_hosts=ps_hosts,
            worker_hosts=worker_hosts,
            chief_hosts=chief_hosts,
            evaluator_hosts=evaluator_hosts,
            job_name=job_name,
            task_index=task_index,
        )
    _check_agreement(config, locals())
    return config


def _check_agreement(config: ClusterConfig, given: dict) -> None:
    """Flags given beside TF_CONFIG or a cluster file must not contradict it."""
    for job in JOB_NAMES:
        text = given.get(f"{job}_hosts")
        if text:
            hosts = parse_host_list(text, f"--{job}_hosts")
            if hosts != config.jobs.get(job, ()):
                raise ConfigError(
                    f"--{job}_hosts={text} disagrees with {config.source} "
                    f"({','.join(config.jobs.get(job, ())) or 'no such job'})"
                )
    if given.get("job_name") is not None and JOB_ALIASES.get(given["job_name"], given["job_name"]) != config.task_type:
        raise ConfigError(
            f"--job_name={given['job_name']} disagrees with {config.source} task type {config.task_type!r}"
        )
    if given.get("task_index") is not None and int(given["task_index"]) != config.task_index:
        raise ConfigError(
            f"--task_index={given['task_index']} disagrees with {config.source} task index {config.task_index}"
        )


def _validate(config: ClusterConfig) -> None:
    where = config.source
    if not config.jobs.get(WORKER) and not config.jobs.get(CHIEF):
        raise ConfigError(f"cluster from {where} has no worker or chief job")
    if len(config.jobs.get(CHIEF, ())) > 1:
        raise ConfigError(f"cluster from {where} has {len(config.jobs[CHIEF])} chief tasks; at most 1")
    seen = {}
    for job, hosts in config.jobs.items():
        for index, address in enumerate(hosts):
            key = split_address(address, where)
            key = (key[0].lower(), key[1])
            if key in seen:
                raise ConfigError(
                    f"address {address} from {where} is used twice: {seen[key]} and /job:{job}/task:{index}"
                )
            seen[key] = f"/job:{job}/task:{index}"
    if config.task_type == EVALUATOR and EVALUATOR not in config.jobs:
        return  # Kubeflow's operator leaves the evaluator out of the cluster: it serves nothing
    if config.task_type not in config.jobs:
        raise ConfigError(
            f"job {config.task_type!r} from {where} is not in the cluster (jobs: {', '.join(config.jobs)})"
        )
    count = len(config.jobs[config.task_type])
    if not 0 <= config.task_index < count:
        raise ConfigError(
            f"task index {config.task_index} from {where} is out of range: "
            f"job {config.task_type!r} has {count} task(s), indices 0-{count - 1}"
        )


def _job_name(value, source: str) -> str:
    name = JOB_ALIASES.get(value, value) if isinstance(value, str) else value
    if name not in JOB_NAMES:
        raise ConfigError(f"unknown job {value!r} from {source}; valid jobs: {', '.join(JOB_NAMES)}")
    return name


def _task_index(value, source: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"task index {value!r} from {source} is not an integer")
    if value < 0:
        raise ConfigError(f"task index {value} from {source} is negative")
    return value
