"""Which task this process serves, learned from its tf.train.Server, and the session config it implies.

TF 1.x sessions of a worker see every device of the cluster unless the
script sets ``device_filters``, so creating one waits for every other worker
("CreateSession still waiting for response from worker"): a worker started
after the chief finished, or while another worker is down, waits forever.
Under the compat layer a worker's or chief's sessions see only the ps job
and the task itself, unless the script chose its own filters.
"""

from __future__ import annotations

import os
import sys

import tensorflow as tf

_v1 = tf.compat.v1
PS_JOB = "ps"

# (job, index) of the server this process started; None until it starts one.
_task: tuple[str, int] | None = None


def current_task() -> tuple[str, int] | None:
    return _task


def set_task(job: str | None, index: int | None) -> None:
    global _task
    _task = None if job is None else (job, int(index or 0))


def device_filters() -> list[str]:
    """The filters a replica's sessions get; empty for a ps or before any server started."""
    if _task is None or _task[0] == PS_JOB:
        return []
    job, index = _task
    return [f"/job:{PS_JOB}", f"/job:{job}/task:{index}"]


def filled_config(config=None):
    """``config`` with this task's device filters added when it has none (a copy; the caller's is untouched)."""
    filters = device_filters()
    if not filters or (config is not None and len(config.device_filters)):
        return config
    filled = _v1.ConfigProto()
    if config is not None:
        filled.CopyFrom(config)
    filled.device_filters.extend(filters)
    return filled


def _task_of_server(server_or_cluster_def, job_name, task_index):
    """The (job, index) a Server will serve, from its arguments or its ServerDef."""
    if isinstance(server_or_cluster_def, tf.train.ServerDef):
        return job_name or server_or_cluster_def.job_name, (
            task_index if task_index is not None else server_or_cluster_def.task_index
        )
    return job_name, task_index


class Server(_v1.train.Server):
    """``tf.train.Server`` that remembers its task, so the process's sessions get device filters."""

    def __init__(self, server_or_cluster_def, job_name=None, task_index=None, protocol=None, config=None, start=True):
        job, index = _task_of_server(server_or_cluster_def, job_name, task_index)
        set_task(job, index)
        super().__init__(
            server_or_cluster_def,
            job_name=job_name,
            task_index=task_index,
            protocol=protocol,
            config=filled_config(config),
            start=start,
        )

    def join(self):
        """Serves forever, as in TF 1.x; a ps started by hand first says how it will end."""
        job, index = _task or (None, None)
        # The launchers (launch_local.py, Kubeflow) set TF_CONFIG and stop the ps themselves.
        if job == PS_JOB and not os.environ.get("TF_CONFIG"):
            sys.stderr.write(
                f"/job:ps/task:{index} serves until it is stopped: server.join() never returns, as in TF 1.x. "
                "Stop it (Ctrl-C) once the workers are done, or start the cluster with scripts/launch_local.py, "
                "which stops the ps tasks when the workers have finished.\n"
            )
            sys.stderr.flush()
        super().join()
