"""Local clusters for tests and notebooks: real task processes, or servers in this process.

``LocalCluster`` starts one process per task on reserved loopback ports and
lets a test kill, restart and wait for tasks; everything it started is
stopped on exit. ``InProcessCluster`` creates one ``tf.compat.v1.train.Server``
per task inside the calling process, as ``tf.test.create_local_cluster`` does,
for fast tests that drive sessions themselves.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping, Sequence

from ps_toolkit.base import paths
from ps_toolkit.cluster.config import CHIEF, EVALUATOR, WORKER, ClusterConfig
from ps_toolkit.launch import verdict
from ps_toolkit.launch.ports import reserve_ports
from ps_toolkit.launch.task_output import LOG, TaskOutput
from ps_toolkit.launch.task_plan import TaskPlan, Topology, default_command, plan_tasks, task_env
from ps_toolkit.process import stack_dump
from ps_toolkit.process.group import ProcessGroup
from ps_toolkit.process.starter import make_starter

_TAIL_BYTES = 4096


class TaskFailedError(RuntimeError):
    """A task ended with a non-zero status; carries its name, status and last log lines."""

    def __init__(self, name: str, exit_code: int | None, log_tail: str):
        what = "did not end in time" if exit_code is None else f"exited with status {exit_code}"
        # Status 0 comes with the verdict's own message (the chief ended without training).
        super().__init__(log_tail if exit_code == 0 else f"{name} {what}; last lines of its log:\n{log_tail}")
        self.name, self.exit_code, self.log_tail = name, exit_code, log_tail


class LocalCluster:
    """One real process per task on loopback ports; every process is stopped on exit.

    Example:
        with LocalCluster(num_ps=1, num_workers=2, train_args=["--train_steps=100"]) as cluster:
            cluster.cluster_spec            # {'ps': ['localhost:15001'], 'worker': [...]}
            cluster.kill("ps", 0)           # SIGKILL, as a crash would
            cluster.restart("ps", 0)        # same address, same command
            cluster.wait(["worker"], timeout_secs=120)   # {'worker:0': 0, 'worker:1': 0}

    Without ``command`` every task runs ``scripts/run_task.py`` with ``train_args``
    (and ``--checkpoint_dir=<log_dir>/checkpoints`` unless they name one);
    with it, ``command`` plus the cluster flags, with TF_CONFIG set. ``start_method``
    "fork" (the default) forks the toolkit's task scripts from this process's fork
    server (ps_toolkit.process.fork_starter), "exec" starts each task as a fresh process.
    """

    def __init__(
        self,
        num_ps: int = 1,
        num_workers: int = 2,
        *,
        chief: bool = False,
        evaluator: bool = False,
        command: Sequence[str] | None = None,
        train_args: Sequence[str] = (),
        log_dir: str | None = None,
        env: Mapping[str, str] | None = None,
        stop_grace_secs: float = 5.0,
        start_method: str = "fork",
        chief_role: str = "chief",
        task_args: str | None = None,
    ):
        self._topology = Topology(num_ps=num_ps, num_workers=num_workers, chief=chief, evaluator=evaluator)
        self._command = list(command) if command else None
        self._train_args = list(train_args)
        self._log_dir = log_dir
        self._env = env
        self._chief_role, self._task_args = chief_role, task_args  # as the launcher's (task_plan.plan_tasks)
        # Every task's process, under its name 'job:index'.
        self._group = ProcessGroup(make_starter(start_method), stop_grace_secs=stop_grace_secs)
        self._reservation = None
        self._plans: dict[str, TaskPlan] = {}
        self.restarts: dict[str, int] = {}

    # Life cycle.
    def start(self) -> LocalCluster:
        """Reserves ports and starts every task, parameter servers first."""
        self.log_dir = self._log_dir or paths.new_run_dir("cluster")
        os.makedirs(self.log_dir, exist_ok=True)
        if self._command is None:
            # Checkpoints in the run folder by default, as the launcher's: pruned with it, never reused by surprise.
            given = any(arg.startswith("--checkpoint_dir") for arg in self._train_args)
            default = [] if given else [f"--checkpoint_dir={os.path.join(self.log_dir, 'checkpoints')}"]
            self._command = default_command([*self._train_args, *default])
        self._reservation = reserve_ports(self._topology.num_tasks)
        jobs = self._topology.jobs_for_ports(self._reservation.ports)
        try:
            plans = plan_tasks(
                jobs,
                self._command,
                base_env=task_env(self._env),
                chief_role=self._chief_role,
                task_args=self._task_args,
            )
            for plan in plans:
                self._plans[plan.name] = plan
                self.restarts[plan.name] = 0
                self._spawn(plan)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stops every task still running (SIGTERM, grace, SIGKILL of the tree); frees the ports."""
        self._group.close()
        if self._reservation is not None:
            self._reservation.release()
            self._reservation = None
        paths.release_run_dir(getattr(self, "log_dir", None))

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    # The cluster.
    @property
    def cluster_spec(self) -> dict[str, list[str]]:
        """The training jobs as a dict (what ``tf.train.ClusterSpec`` takes)."""
        jobs: dict[str, list[str]] = {}
        for plan in self._plans.values():
            if plan.job != EVALUATOR:
                jobs.setdefault(plan.job, []).append(plan.address)
        return jobs

    @property
    def addresses(self) -> dict[str, str]:
        """'job:index' -> 'localhost:port' for every task."""
        return {name: plan.address for name, plan in self._plans.items()}

    def cluster_config(self, job: str, index: int) -> ClusterConfig:
        """The cluster as task ``job:index`` sees it (its TF_CONFIG)."""
        return ClusterConfig.from_tf_config(self._plan(job, index).env["TF_CONFIG"])

    # Tasks.
    def pid(self, job: str, index: int) -> int:
        """The process id of task ``job:index``."""
        return self._group.process(self._plan(job, index).name).pid

    def returncode(self, job: str, index: int) -> int | None:
        """The task's exit status, or None while it runs."""
        return self._group.returncode(self._plan(job, index).name)

    def log_path(self, job: str, index: int) -> str:
        """The file task ``job:index`` logs to: ``<log_dir>/<job>-<index>.log``."""
        return os.path.join(self.log_dir, f"{job}-{index}.log")

    def log_tail(self, job: str, index: int) -> str:
        """The last 4 KiB of task ``job:index``'s log."""
        with open(self.log_path(job, index), "rb") as handle:
            handle.seek(max(0, os.path.getsize(self.log_path(job, index)) - _TAIL_BYTES))
            return handle.read().decode("utf-8", "replace")

    def kill(self, job: str, index: int, sig: int = signal.SIGKILL, timeout_secs: float = 10.0) -> int | None:
        """Sends ``sig`` to the task's process tree and waits (bounded) for it to exit.

        Args:
            job: The task's job.
            index: The task's index.
            sig: The signal; SIGKILL, as a crash would, by default.
            timeout_secs: The longest wait for the exit.

        Returns:
            The task's exit status, or None if it still runs after ``timeout_secs``.

        Raises:
            KeyError: no such task in this cluster.
        """
        name = self._plan(job, index).name
        self._group.kill(name, sig)
        return self._group.wait([name], time.monotonic() + timeout_secs)[name]

    def restart(self, job: str, index: int) -> None:
        """Stops the task if it runs, then starts it again on the same address."""
        plan = self._plan(job, index)
        self._group.stop([plan.name])
        self.restarts[plan.name] += 1
        self._spawn(plan)

    def wait(self, jobs: Sequence[str] = ("chief", "worker"), timeout_secs: float = 300.0) -> dict[str, int]:
        """Waits until every task of ``jobs`` has exited.

        Args:
            jobs: The jobs to wait for (parameter servers never end by themselves).
            timeout_secs: The longest wait.

        Returns:
            'job:index' -> exit status, for every task of ``jobs``.

        Raises:
            TaskFailedError: as soon as one exits non-zero, or when the timeout passes
                first (naming a task still running, with its threads' stacks).
        """
        names = [name for name, plan in self._plans.items() if plan.job in jobs]
        codes = self._group.wait(names, time.monotonic() + timeout_secs, stop_at_failure=True)
        for name, code in codes.items():
            if code not in (None, 0):
                raise TaskFailedError(name, code, self._tail(name))
        pending = [name for name, code in codes.items() if code is None]
        if pending:
            raise TaskFailedError(pending[0], None, self._tail(pending[0]) + self._stacks(pending[0]))
        return codes

    def verdict(self, timeout_secs: float = 300.0) -> str:
        """The launcher's verdict on this cluster: did the job succeed, and did it train.

        Waits for the chief, the workers and the evaluator as ``wait`` does, then
        applies the launcher's rule (``ps_toolkit.launch.verdict``).

        Args:
            timeout_secs: The longest wait for the tasks.

        Returns:
            What shows that training happened, e.g. 'global step 200 (chief:0)'.

        Raises:
            TaskFailedError: a task failed, or did not end in time, or nothing trained
                (naming the chief and its last lines).
        """
        jobs = (CHIEF, WORKER, EVALUATOR)
        codes = self.wait(jobs, timeout_secs)
        outputs = {name: self._output(name) for name in codes}
        chief = f"{CHIEF}:0" if f"{CHIEF}:0" in self._plans else f"{WORKER}:0"
        message = f"the chief ({chief}) finished with status 0"
        ends = [verdict.TaskEnd(name, "finished") for name in codes]
        ok, message, _ = verdict.confirm(message, ends, outputs, chief, list(outputs[chief].tail))
        if not ok:
            raise TaskFailedError(chief, 0, message)
        return verdict.training_evidence(outputs) or ""

    def _output(self, name: str) -> TaskOutput:
        """The task's log read back as the launcher reads it (progress, results, printed scores)."""
        plan = self._plans[name]
        with open(os.devnull, "ab", buffering=0) as sink, open(self.log_path(plan.job, plan.index), "rb") as log:
            output = TaskOutput(name, sink, None)
            output.feed(LOG, log.read())
            output.feed(LOG, b"")
        return output

    def _stacks(self, name: str) -> str:
        """The running task's Python stacks (stack_dump), as a section of an error message; '' if none."""
        plan = self._plans[name]
        stacks = stack_dump.stacks_of_task(
            plan.argv, self._group.process(name).pid, self.log_path(plan.job, plan.index)
        )
        return f"\n--- where it waits: its threads' Python stacks ---\n{stacks}" if stacks else ""

    def _tail(self, name: str) -> str:
        plan = self._plans[name]
        return self.log_tail(plan.job, plan.index)

    def _plan(self, job: str, index: int) -> TaskPlan:
        name = f"{job}:{index}"
        if name not in self._plans:
            raise KeyError(f"no task {name} in this cluster (tasks: {', '.join(self._plans)})")
        return self._plans[name]

    def _spawn(self, plan: TaskPlan) -> None:
        with open(self.log_path(plan.job, plan.index), "ab") as log:
            log.write(f"--- start: {' '.join(plan.argv)} ---\n".encode())
            log.flush()
            self._group.start(plan.name, plan.argv, env=plan.env, stdout=log, stderr=log)


class InProcessCluster:
    """One ``tf.compat.v1.train.Server`` per task, in this process, on reserved ports.

    Example:
        cluster = InProcessCluster(num_ps=1, num_workers=2).start()
        with tf.compat.v1.Session(cluster.targets["worker"][0]) as session: ...

    gRPC servers cannot be shut down inside a process; ``stop()`` only frees the
    port claims (the servers end with the process), so share one per test session.
    """

    def __init__(self, num_ps: int = 1, num_workers: int = 2, *, chief: bool = False, config=None):
        self._topology = Topology(num_ps=num_ps, num_workers=num_workers, chief=chief)
        self._config = config
        self._reservation = None
        self.cluster_spec: dict[str, list[str]] = {}
        self.servers: dict[str, list] = {}

    def start(self) -> InProcessCluster:
        """Reserves a port per task and starts every task's server in this process; returns ``self``."""
        import tensorflow as tf

        self._reservation = reserve_ports(self._topology.num_tasks)
        jobs = self._topology.jobs_for_ports(self._reservation.ports)
        self.cluster_spec = {job: list(hosts) for job, hosts in jobs.items()}
        spec = tf.train.ClusterSpec(self.cluster_spec)
        for job, hosts in jobs.items():
            self.servers[job] = [
                tf.compat.v1.train.Server(spec, job_name=job, task_index=i, config=self._config, start=True)
                for i in range(len(hosts))
            ]
        self._publish_ps_memory()
        return self

    def _publish_ps_memory(self) -> None:
        """What a ps task does at start: says the memory its dynamic tables' default bound counts."""
        from ps_toolkit.dynamic_embedding import ps_memory  # TensorFlow, imported only once a cluster starts

        addresses = self.cluster_spec.get("ps", [])
        for i, server in enumerate(self.servers.get("ps", [])):
            memory = ps_memory.memory_of_this_host(addresses, i)
            ps_memory.publish(server.target, f"/job:ps/task:{i}", memory, self._config)

    @property
    def targets(self) -> dict[str, list[str]]:
        """Session targets per job: ``targets['worker'][0]`` is 'grpc://localhost:port'."""
        return {job: [server.target for server in servers] for job, servers in self.servers.items()}

    def cluster_config(self, job: str, index: int) -> ClusterConfig:
        """The cluster with task ``job:index`` as this process's role."""
        return ClusterConfig(jobs=self.cluster_spec, task_type=job, task_index=index, source="InProcessCluster")

    def stop(self) -> None:
        """Frees the port reservations; the servers end with the process."""
        if self._reservation is not None:
            self._reservation.release()
            self._reservation = None

    def __enter__(self) -> InProcessCluster:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()
