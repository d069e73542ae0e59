"""Runs a parameter-server job on a Ray cluster: one actor per task, judged as the local launcher judges.

The launch is the local launcher's with Ray underneath: a placement group with
one bundle per task (its resource request; SPREAD puts the ps, which come
first, on different nodes when there are several), a ``PortHolder`` per bundle
that reserves the task's port on that node, the addresses gathered into one
cluster before any server starts, and then the local launcher's ``ClusterSupervisor``
over one ``ray_task`` process per task, which owns that task's actor. Verdict,
restarts (the actor made again in its bundle, on its port), drills, timeouts,
logs, summary and Ctrl-C are therefore the local launcher's own.

Example:
    options = LaunchOptions(Topology(num_ps=2, num_workers=2), command=default_command(["--train_steps=200"]))
    result = launch(options, RayOptions(address="auto"))
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import sys
import uuid

from ps_toolkit.backends import local as launcher
from ps_toolkit.backends.local import LaunchOptions, RunResult
from ps_toolkit.backends.ray.elastic import ElasticWorkers, check_bounds
from ps_toolkit.backends.ray.nodes import PortHolder
from ps_toolkit.backends.ray.sizing import JobRequest, check_own_gpus, job_request, own_ray_cpus, placement_refusal
from ps_toolkit.base import paths
from ps_toolkit.base.errors import ConfigError, RetryableError
from ps_toolkit.base.progress_lines import CLUSTER_ARGS_ENV
from ps_toolkit.cluster.config import ELASTIC_WORKERS_FROM_ENV, PS, WORKER
from ps_toolkit.launch.engine_env import carried_env
from ps_toolkit.launch.status import Console
from ps_toolkit.launch.supervisor import ClusterSupervisor, LogFolderWarning
from ps_toolkit.launch.task_plan import START_ORDER, TaskPlan, plan_tasks, task_env
from ps_toolkit.process import lifecycle
from ps_toolkit.process.starter import ExecStarter

# What a task's actor gets from the launch's plan besides engine_env's: its cluster, unbuffered output, and the
# cluster flags appended to its command (run_legacy keeps them from an old script's own flags by this list, and
# reports progress only where a launcher set it).
_PLAN_ENV_KEYS = ("TF_CONFIG", "PYTHONUNBUFFERED", CLUSTER_ARGS_ENV)


@dataclasses.dataclass(frozen=True)
class RayOptions:
    """Where the job runs on Ray and what each task asks for.

    ``address`` None starts a Ray of this process's own (``local_num_cpus`` logical CPUs), stopped at
    the end; "auto" or HOST:PORT joins a running cluster. ``ready_secs`` bounds the wait for the
    placement group and the port holders: a cluster that cannot hold the job fails, never hangs.
    """

    address: str | None = None
    ps_cpus: float = 1.0
    worker_cpus: float = 1.0
    worker_gpus: float = 0.0
    local_num_cpus: int | None = None
    ready_secs: float = 120.0
    # Elastic async workers (ray_elastic): the topology's workers are the permanent ``min_workers``;
    # up to ``max_workers`` run while the run folder's ``workers`` file asks for them.
    min_workers: int | None = None
    max_workers: int | None = None

    def __post_init__(self):
        check_bounds(self.min_workers, self.max_workers)
        for name in ("ps_cpus", "worker_cpus", "worker_gpus"):
            value = getattr(self, name)
            if not 0 <= value <= 1024:
                raise ConfigError(f"--ray_{name}={value}: must be between 0 and 1024")
        if self.ps_cpus + self.worker_cpus <= 0:
            raise ConfigError("--ray_ps_cpus and --ray_worker_cpus are both 0: a bundle must ask for something")
        if self.ready_secs <= 0:
            raise ConfigError(f"ready_secs={self.ready_secs} must be positive")

    def bundle(self, job: str) -> dict[str, float]:
        """The resources one task of ``job`` asks for (a ps: CPUs only)."""
        cpus = self.ps_cpus if job == PS else self.worker_cpus
        gpus = 0.0 if job == PS else self.worker_gpus
        # A bundle of nothing is refused by Ray: a task asking for no CPU still takes a sliver.
        return {"CPU": cpus or 0.01, **({"GPU": gpus} if gpus else {})}


def launch(options: LaunchOptions, ray_options: RayOptions, console: Console | None = None) -> RunResult:
    """Runs the job on Ray to its end and reports, as ``launcher.launch`` does locally."""
    if options.topology.explicit:
        raise ConfigError("--*_hosts: on Ray every task's address is its node's, chosen by the launch; give counts")
    _check_elastic(options, ray_options)
    console = console or Console(sys.stdout)
    log_dir = launcher.make_run_dir(options.log_dir)
    console.line(f"launch_ray: run folder {log_dir}")
    log_warning = LogFolderWarning(log_dir, console.line)
    try:
        elastic_lines: list[str] = []
        tasks, elastic = _task_slots(options, ray_options)
        request = job_request([name for name, _ in tasks], len(elastic), ray_options.bundle)
        with _RayJob(ray_options, console, request) as job:
            outcome = _supervise(options, job, console, log_dir, log_warning, elastic_lines)
        result = launcher.report(outcome, log_dir, console, log_warning, chart=options.chart)
        if elastic_lines:  # the workers' changes and each phase's steps/s go with the table into summary.txt
            with open(os.path.join(log_dir, launcher.SUMMARY_FILE), "a", encoding="utf-8") as summary:
                summary.write("".join(f"{line}\n" for line in elastic_lines))
        return result
    finally:
        paths.release_run_dir(log_dir)


def _task_slots(options: LaunchOptions, ray_options: RayOptions):
    """(role, index) of each permanent task, servers first (the order plan_tasks starts them in), and of
    each elastic worker slot."""
    counts = options.topology.jobs_for_ports(range(1, options.topology.num_tasks + 1))
    tasks = [(role, index) for role in START_ORDER for index in range(len(counts.get(role, ())))]
    return tasks, _elastic_slots(options, ray_options)


def _supervise(options: LaunchOptions, job: _RayJob, console: Console, log_dir: str, log_warning, elastic_lines):
    # One bundle per task.
    tasks, elastic = _task_slots(options, job.options)
    addresses, nodes = job.place([name for name, _ in tasks], floating=len(elastic))
    cluster: dict[str, list[str]] = {}
    for (name, _), address in zip([*tasks, *elastic], addresses, strict=True):
        cluster.setdefault(name, []).append(address)
    base_env = task_env(options.env)
    if elastic:
        base_env[ELASTIC_WORKERS_FROM_ENV] = str(job.options.min_workers)
    plans = plan_tasks(cluster, options.command, base_env=base_env)
    console.line("launch_ray: cluster " + ", ".join(f"{p.name}={p.address}" for p in plans))
    extra = (ELASTIC_WORKERS_FROM_ENV,) if elastic else ()
    env_keys = ",".join(dict.fromkeys((*_PLAN_ENV_KEYS, *extra, *carried_env(options.env))))
    bundles = {f"{name}:{index}": bundle for bundle, (name, index) in enumerate(tasks)}
    floating = {f"{name}:{index}": node for (name, index), node in zip(elastic, nodes[len(tasks) :], strict=True)}
    proxied = [
        _proxied(plan, job, env_keys, bundle=bundles.get(plan.name), node=floating.get(plan.name)) for plan in plans
    ]
    permanent = [plan for plan in proxied if plan.name not in floating]
    # Ray's own port pool is not ours to redraw: a taken port is a failure of its task (restarted or fatal).
    policy = dataclasses.replace(options.policy, retry_port_conflicts=False)
    reaper = lifecycle.RunReaper()  # if this process is SIGKILLed, the ray_task processes and so the actors go
    try:
        pool_context = _elastic_workers(proxied, floating, options, job, log_dir, reaper)
        with launcher.signals_wake() as signal_fd, pool_context as pool:
            supervisor = ClusterSupervisor(
                permanent,
                log_dir=log_dir,
                policy=policy,
                console=console,
                quiet=options.quiet,
                starter=ExecStarter(),
                log_warning=log_warning,
                on_start=reaper.add,
            )
            outcome = supervisor.run(signal_fd=signal_fd)
        for line in pool.summary_lines() if pool else ():
            console.line(f"launch_ray: {line}")
            elastic_lines.append(line)
        return outcome
    finally:
        reaper.close()


def _check_elastic(options: LaunchOptions, ray_options: RayOptions) -> None:
    """Elastic workers need async training and the topology's workers to be the permanent ones."""
    if ray_options.min_workers is None:
        return
    if options.topology.num_workers != ray_options.min_workers:
        raise ConfigError(
            f"the topology has {options.topology.num_workers} workers but min_workers={ray_options.min_workers}: "
            "the permanent workers are the topology's"
        )
    if any(arg in ("--sync_replicas", "--sync_replicas=true", "--sync_replicas=True") for arg in options.command):
        raise ConfigError("--min_workers/--max_workers with --sync_replicas: only async workers can come and go")


def _elastic_slots(options: LaunchOptions, ray_options: RayOptions) -> list[tuple[str, int]]:
    if ray_options.min_workers is None:
        return []
    return [(WORKER, index) for index in range(ray_options.min_workers, ray_options.max_workers)]


@contextlib.contextmanager
def _elastic_workers(plans, floating, options: LaunchOptions, job: _RayJob, log_dir: str, reaper):
    if not floating:
        yield None
        return
    chief = "chief-0.log" if options.topology.chief else "worker-0.log"
    pool = ElasticWorkers(
        [plan for plan in plans if plan.name in floating],
        min_workers=job.options.min_workers,
        log_dir=log_dir,
        chief_log=os.path.join(log_dir, chief),
        stop_grace_secs=options.policy.stop_grace_secs,
        on_start=reaper.add,
    )
    with pool:
        yield pool


def _proxied(plan: TaskPlan, job: _RayJob, env_keys: str, *, bundle: int | None, node: str | None) -> TaskPlan:
    """The plan whose process is the task's ``ray_task`` (the actor's owner) instead of the task itself.

    A task has its ``bundle`` in the placement group, or (an elastic worker) the ``node`` that holds its port.
    """
    resources = job.options.bundle(plan.job)
    if node is None:
        where = (f"--placement_group={job.group_name}", f"--bundle={bundle}")
    else:
        where = (f"--node_id={node}", f"--ready_secs={job.options.ready_secs:g}")
    argv = (
        sys.executable,
        "-m",
        "ps_toolkit.backends.ray.task",
        f"--address={job.address}",
        f"--namespace={job.namespace}",
        *where,
        f"--num_cpus={resources['CPU']}",
        f"--num_gpus={resources.get('GPU', 0.0)}",
        f"--launcher_python={sys.executable}",
        f"--env_keys={env_keys}",
        f"--cwd={os.getcwd()}",
        "--",
        *plan.argv,
    )
    return dataclasses.replace(plan, argv=argv)


class _RayJob:
    """The job's hold on Ray: the connection (or a Ray of its own), the placement group and the port holders."""

    def __init__(self, options: RayOptions, console: Console, request: JobRequest):
        self.options = options
        self._console = console
        self._request = request
        self.namespace = f"ps_toolkit-{uuid.uuid4().hex[:12]}"
        self.group_name = f"{self.namespace}-tasks"
        self.address = ""
        self._group = None
        self._holders: list = []

    def __enter__(self) -> _RayJob:
        # A Ray of its own holds the job: its logical CPUs are Ray's bookkeeping, not the machine's cores.
        own_cpus = None if self.options.address else own_ray_cpus(self._request, self.options.local_num_cpus)
        import ray

        where = self.options.address or "a local Ray of its own"
        self._console.line(f"launch_ray: connecting to {where}")
        _check_reachable(self.options.address, self.options.ready_secs)
        own = {} if own_cpus is None else {"num_cpus": own_cpus, "include_dashboard": False}
        try:
            ray.init(
                address=self.options.address,
                namespace=self.namespace,
                log_to_driver=False,
                logging_level="WARNING",
                **own,
            )
        except Exception as err:  # Ray raises ConnectionError, RuntimeError and bare Exception here
            first = next((line for line in str(err).splitlines() if line.strip()), type(err).__name__)
            raise RetryableError(f"cannot start or reach Ray ({where}): {first[:300]}") from None
        self.address = ray.get_runtime_context().gcs_address
        if own_cpus is not None:
            self._console.line(f"launch_ray: a Ray of its own with {own_cpus} logical CPUs")
            try:
                check_own_gpus(self._request, ray.cluster_resources().get("GPU", 0.0))
            except ConfigError:
                ray.shutdown()
                raise
        return self

    def place(self, jobs: list[str], floating: int = 0) -> tuple[list[str], list[str]]:
        """Reserves a bundle and a port on its node for each task (in ``jobs`` order), then a port on some
        node for each of ``floating`` elastic workers (no resources held); their HOST:PORT and node ids."""
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        bundles = [self.options.bundle(job) for job in jobs]
        self._group = placement_group(bundles, strategy="SPREAD", name=self.group_name)
        if not self._group.wait(timeout_seconds=self.options.ready_secs):
            free = ray.available_resources()
            raise ConfigError(placement_refusal(self.address, self._request, self.options.ready_secs, free))
        holder = ray.remote(PortHolder)
        in_bundle = [PlacementGroupSchedulingStrategy(self._group, index) for index in range(len(bundles))]
        self._holders = [holder.options(num_cpus=0, scheduling_strategy=where).remote() for where in in_bundle]
        self._holders += [holder.options(num_cpus=0, scheduling_strategy="SPREAD").remote() for _ in range(floating)]
        found = ray.get([h.address.remote() for h in self._holders], timeout=self.options.ready_secs)
        nodes = {node for node, _, _ in found[: len(bundles)]}
        self._console.line(f"launch_ray: {len(bundles)} tasks on {len(nodes)} node(s)")
        if floating:
            self._console.line(f"launch_ray: {floating} elastic worker slot(s), ports held, no resources")
        # Tasks that are all on one node reach each other on loopback: their ports are then kept in the
        # cluster's private network namespace, as launch_local.py's are, without root or a packet filter.
        one_node = len({node for node, _, _ in found}) == 1
        hosts = ["127.0.0.1" if one_node else ip for _, ip, _ in found]
        return [f"{host}:{port}" for host, (_, _, port) in zip(hosts, found, strict=True)], [n for n, _, _ in found]

    def __exit__(self, *exc_info) -> None:
        import ray
        from ray.util.placement_group import remove_placement_group

        try:
            for holder in self._holders:
                ray.kill(holder)  # its claim on the port dies with it
            if self._group is not None:
                remove_placement_group(self._group)
        finally:
            ray.shutdown()  # a Ray of this process's own stops with it


def _check_reachable(address: str | None, timeout_secs: float) -> None:
    """A HOST:PORT nothing answers at is refused within the bound: Ray itself would retry it for minutes."""
    if address is None or address == "auto" or "://" in address:
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"--address={address!r}: give auto or HOST:PORT of the cluster's head (its GCS)")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=min(timeout_secs, 30.0)).close()
    except OSError as err:
        raise RetryableError(f"--address={address}: nothing answers there ({err.strerror or err})") from None


def run_ray(options: LaunchOptions, settings: RayOptions) -> RunResult:
    """The ``ray`` backend (backends.registry): ``launch`` with the Ray settings."""
    return launch(options, settings)
