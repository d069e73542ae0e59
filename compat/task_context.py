"""Which task this process serves, learned from its tf.train.Server, and the session config it implies.

TF 1.x sessions of a worker see every device of the cluster unless the
script sets ``device_filters``, so creating one waits for every other worker
("CreateSession still waiting for response from worker"): a worker started
after the chief finished, or while another worker is down, waits forever.
Under the compat layer a worker's or chief's sessions see the ps job, the
task itself and every task or job the session's graph pins ops on (a
master that builds on ``/job:worker``, replica_device_setter's default, runs
those ops on a worker as in TF 1.x), unless the script chose its own filters.
A session made on an empty graph sees the whole cluster, as in TF 1.x: what
it will run is not known yet. A server that
shares its host with another task of its cluster does not spin-wait, as the
toolkit's own tasks (ps_toolkit.task.server.session_config).
"""

from __future__ import annotations

import sys

import tensorflow as tf

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.cluster.tf_config import tf_config_text
from ps_toolkit.task.server import tasks_on_host

_v1 = tf.compat.v1
PS_JOB = "ps"

# (job, index) of the server this process started; None until it starts one.
_task: tuple[str, int] | None = None


def current_task() -> tuple[str, int] | None:
    return _task


def set_task(job: str | None, index: int | None) -> None:
    global _task
    _task = None if job is None else (job, int(index or 0))


def device_filters(graph=None) -> list[str]:
    """The filters a replica's sessions get; empty for a ps, before any server started, or for an empty graph.

    Args:
        graph: the session's graph; None for the filters of the task alone (the ps job and the task).

    Returns:
        Device filters: the ps job, the task itself, and each task (or whole job) ``graph`` pins ops on.
    """
    if _task is None or _task[0] == PS_JOB:
        return []
    job, index = _task
    own = [f"/job:{PS_JOB}", f"/job:{job}/task:{index}"]
    if graph is None:
        return own
    pinned = pinned_tasks(graph)
    if pinned is None:
        return []
    whole_jobs = {filter_ for filter_ in [*own, *pinned] if "/task:" not in filter_}
    covered = set(own) | {filter_ for filter_ in pinned if filter_.split("/task:")[0] in whole_jobs - {filter_}}
    return own + sorted(pinned - covered)


def pinned_tasks(graph) -> set[str] | None:
    """Every task (``/job:J/task:T``) or whole job (``/job:J``) an op of ``graph`` is pinned on; None if no op yet."""
    operations = graph.get_operations()
    if not operations:
        return None
    devices = {operation.device for operation in operations}
    return {filter_ for filter_ in map(_task_filter, devices) if filter_}


def _task_filter(device: str) -> str:
    """``/job:worker/task:1/device:CPU:0`` -> ``/job:worker/task:1``; a device without a job -> ''."""
    spec = tf.DeviceSpec.from_string(device)
    if not spec.job:
        return ""
    if spec.task is None:
        return f"/job:{spec.job}"
    return f"/job:{spec.job}/task:{spec.task}"


def filled_config(config=None, graph=None):
    """``config`` with the session's device filters added when it has none (a copy; the caller's is untouched).

    Args:
        config: the script's ConfigProto, or None.
        graph: the session's graph (see ``device_filters``); None for the task's own filters.

    Returns:
        ``config`` itself where the script set filters or no filters apply, else a filled copy.
    """
    filters = device_filters(graph)
    if not filters or (config is not None and len(config.device_filters)):
        return config
    filled = _v1.ConfigProto()
    if config is not None:
        filled.CopyFrom(config)
    filled.device_filters.extend(filters)
    return filled


def server_config(config, server_or_cluster_def, job: str | None, index: int | None):
    """The config this process's server starts with: ``filled_config``, and no spin-waiting where the
    cluster puts another task on this task's host. The caller's config is never modified."""
    filled = filled_config(config)
    if job is None or index is None or not _shares_host(server_or_cluster_def, job, index):
        return filled
    spinless = _v1.ConfigProto()
    if filled is not None:
        spinless.CopyFrom(filled)
    spinless.experimental.disable_thread_spinning = True
    return spinless


def _shares_host(server_or_cluster_def, job: str, index: int) -> bool:
    try:
        if isinstance(server_or_cluster_def, tf.train.ServerDef):
            server_or_cluster_def = server_or_cluster_def.cluster
        spec = tf.train.ClusterSpec(server_or_cluster_def)
        own = spec.task_address(job, index)
        addresses = [address for tasks in spec.as_dict().values() for address in _addresses(tasks)]
        return tasks_on_host(addresses, own, "the script's ClusterSpec") > 1
    except (ConfigError, TypeError, ValueError, AttributeError):  # TensorFlow's own start reports it
        return False


def _addresses(tasks) -> list:
    """A job's addresses from ClusterSpec.as_dict(): a list, or {index: address} for a sparse job."""
    return list(tasks.values()) if isinstance(tasks, dict) else list(tasks)


def task_of_server(server_or_cluster_def, job_name, task_index):
    """The (job, index) a Server will serve, from its arguments or its ServerDef, or as TensorFlow
    infers them: the cluster's only job, the job's only task. None where TensorFlow will refuse."""
    if isinstance(server_or_cluster_def, tf.train.ServerDef):
        job_name = job_name or server_or_cluster_def.job_name
        task_index = task_index if task_index is not None else server_or_cluster_def.task_index
        return job_name or None, task_index
    try:
        spec = tf.train.ClusterSpec(server_or_cluster_def)
        if job_name is None and len(spec.jobs) == 1:
            job_name = spec.jobs[0]
        if job_name is not None and task_index is None and len(spec.task_indices(job_name)) == 1:
            task_index = spec.task_indices(job_name)[0]
    except (TypeError, ValueError, AttributeError):  # TensorFlow's own start reports it
        pass
    return job_name, task_index


class Server(_v1.train.Server):
    """``tf.train.Server`` that remembers its task, so the process's sessions get device filters."""

    def __init__(self, server_or_cluster_def, job_name=None, task_index=None, protocol=None, config=None, start=True):
        job, index = task_of_server(server_or_cluster_def, job_name, task_index)
        set_task(job, index)
        super().__init__(
            server_or_cluster_def,
            job_name=job_name,
            task_index=task_index,
            protocol=protocol,
            config=server_config(config, server_or_cluster_def, job, index),
            start=start,
        )


def say_how_a_ps_ends(job: str, index: int) -> None:
    """What a ps started by hand says when it ``join()``s: it serves until stopped, as in TF 1.x."""
    # The launchers (launch_local.py, Kubeflow) set TF_CONFIG and stop the ps themselves.
    if job == PS_JOB and tf_config_text() is None:
        sys.stderr.write(
            f"/job:ps/task:{index} serves until it is stopped: server.join() never returns, as in TF 1.x. "
            "Stop it (Ctrl-C) once the workers are done, or start the cluster with scripts/launch_local.py, "
            "which stops the ps tasks when the workers have finished.\n"
        )
        sys.stderr.flush()
