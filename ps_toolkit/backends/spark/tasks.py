"""What one barrier task of a Spark launch runs on its executor: a port, the cluster by allGather, the task.

The partition number is the task's role (the driver's ``roles``, servers first).
The port is reserved on the executor's host with the local launcher's
reservation and held until the task ends; ``BarrierTaskContext.allGather``
gives every task every address before any server starts (loopback ones when the
stage is on one host); the task itself is
``plan_tasks``' plan, the command and TF_CONFIG a local task gets. A task that
fails with a status a restart may cure raises, which fails the barrier stage:
Spark then runs the whole stage again (every task on fresh ports) and the chief
resumes from its checkpoint. Any other end returns the task's output and status
to the driver, which judges the run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence

from ps_toolkit.backends.spark.partition import PARTITION_ENV, write_partition
from ps_toolkit.base.errors import EXIT_CONFIG, EXIT_ENVIRONMENT
from ps_toolkit.launch.ports import reserve_ports
from ps_toolkit.launch.status import describe_exit
from ps_toolkit.launch.task_plan import plan_tasks, task_env
from ps_toolkit.process import lifecycle

# The first line of a retryable failure's message, which the driver finds in Spark's error text.
FAILURE_MARKER = "ps_toolkit barrier task failed:"
_TAIL_LINES = 20


def _task_host(infos, index: int) -> str:
    """The host the task ``index`` serves on: its executor's, or loopback when every task of the stage is on
    one host. A one-host cluster's ports are then kept in its private network namespace, as launch_local.py's
    are, without root or a packet filter; only a stage over several hosts needs the port guard."""
    hosts = [info.address.rsplit(":", 1)[0] for info in infos]
    return "127.0.0.1" if len(set(hosts)) == 1 else hosts[index]


class RetryableTaskExit(RuntimeError):
    """A task ended with a status a restart may cure: raised to fail the stage, so Spark retries it."""


def run_barrier_task(
    _rows: Iterator,
    *,
    roles: Sequence[tuple[str, int]],
    command: Sequence[str],
    env: Mapping[str, str],
    retry: bool,
    with_rows: bool = False,
) -> Iterator[tuple]:
    """The body of partition ``i``: runs task ``roles[i]``; yields (name, address, status, secs, stage id, output).

    ``with_rows``: the partition's rows are the task's input (spark_partition), written beside it for its input_fn.
    """
    from pyspark import BarrierTaskContext  # only on an executor

    context = BarrierTaskContext.get()
    index = context.partitionId()
    job, job_index = roles[index]
    host = _task_host(context.getTaskInfos(), index)
    folder = tempfile.mkdtemp(prefix="ps_toolkit-partition-") if with_rows else None
    if folder is not None:
        write_partition(_rows, os.path.join(folder, "rows.npz"))
        env = {**env, PARTITION_ENV: os.path.join(folder, "rows.npz")}
    reservation = reserve_ports(1)
    try:
        addresses = context.allGather(f"{host}:{reservation.ports[0]}")
        cluster: dict[str, list[str]] = {}
        for (name, _), address in zip(roles, addresses, strict=True):
            cluster.setdefault(name, []).append(address)
        plans = plan_tasks(cluster, command, base_env=task_env(env))
        plan = next(p for p in plans if p.name == f"{job}:{job_index}")
        started = time.monotonic()
        # Its own session, killed if this Python worker dies (Spark kills it with the stage).
        process = lifecycle.spawn(plan.argv, env=plan.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        with process.stdout:
            output = process.stdout.read()
        code = process.wait()
    finally:
        reservation.release()
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
    if code != 0 and retry and code not in (EXIT_CONFIG, EXIT_ENVIRONMENT):
        tail = "\n".join(output.decode("utf-8", "replace").splitlines()[-_TAIL_LINES:])
        raise RetryableTaskExit(
            f"{FAILURE_MARKER} {code} {plan.name} ({plan.address}) {describe_exit(code, False)} "
            f"; its last lines:\n{tail}"
        )
    yield plan.name, plan.address, code, time.monotonic() - started, context.stageId(), output
