"""One tf.train.Server per task and its per-role session config (the ps loop is in roles/ps.py)."""

from __future__ import annotations

import ipaddress
import logging
import os

import tensorflow as tf

from ps_toolkit.base.errors import PortInUseError
from ps_toolkit.cluster.addresses import is_loopback_host, split_address
from ps_toolkit.cluster.config import PS, ClusterConfig
from ps_toolkit.cluster.preflight import check_host_resolves, check_port_free
from ps_toolkit.network import open_ports
from ps_toolkit.network.netns import PRIVATE_NETWORK_ENV

log = logging.getLogger(__name__)


def session_config(
    cluster: ClusterConfig,
    *,
    intra_op_threads: int | None = None,
    inter_op_threads: int | None = None,
) -> tf.compat.v1.ConfigProto:
    """The session config for this task's role.

    Parameter servers see no GPU. Replicas get device_filters limited to the ps
    job and themselves, so session creation never waits for another worker
    (the "CreateSession still waiting for response from worker" hang). A task
    that shares its host with other tasks of the cluster does not spin-wait.
    """
    config = tf.compat.v1.ConfigProto(
        allow_soft_placement=True,
        intra_op_parallelism_threads=intra_op_threads or default_intra_op_threads(cluster),
        # Two inter-op threads keep the RPC-bound graph moving on small machines.
        inter_op_parallelism_threads=inter_op_threads or 2,
    )
    # TensorFlow's thread pools spin between ops before they sleep: on a host its tasks
    # share, a spinning thread holds a core another task's thread is waiting for
    # (docs/performance.md: less CPU per step and more steps/s without it). A task alone
    # on its host keeps TensorFlow's default.
    config.experimental.disable_thread_spinning = colocated_tasks(cluster) > 1
    if cluster.task_type == PS:
        config.device_count["GPU"] = 0
        config.device_filters.append(cluster.device)
    else:
        config.device_filters.extend(["/job:ps", cluster.device])
    return config


def default_intra_op_threads(cluster: ClusterConfig, cpus: int | None = None) -> int:
    """This task's share of its host's cores for one op's arithmetic.

    Tasks sharing a machine share its cores: a pool of one thread per core in
    every process oversubscribes them. The tasks that compute (chief, workers,
    evaluator) share the cores among themselves; a ps mostly moves bytes, so it
    takes a share counted over every task on the host (docs/performance.md has
    the measurements behind both rules).
    """
    cpus = cpus or os.cpu_count() or 1
    sharing = colocated_tasks(cluster) if cluster.task_type == PS else colocated_tasks(cluster, exclude_jobs=(PS,))
    return max(1, cpus // sharing)


def colocated_tasks(cluster: ClusterConfig, exclude_jobs: tuple[str, ...] = ()) -> int:
    """How many tasks of the cluster (this one included, ``exclude_jobs`` not) run on this task's host."""
    addresses = [a for job, job_addresses in cluster.jobs.items() if job not in exclude_jobs for a in job_addresses]
    return max(1, tasks_on_host(addresses, cluster.address, cluster.source))


def tasks_on_host(addresses, own_address: str, source: str) -> int:
    """How many of ``addresses`` ('host:port') are on ``own_address``'s host; loopback names are one host.

    ConfigError, naming ``source``, for an address that is not host:port.
    """
    own_host = _host_key(split_address(own_address, source)[0])
    return sum(_host_key(split_address(a, source)[0]) == own_host for a in addresses)


def _host_key(host: str) -> str:
    """One key per host: every loopback name is one, an IP address in its canonical form, a name lower-cased."""
    name = host.lower().rstrip(".")
    if is_loopback_host(name):
        return "loopback"
    try:
        return str(ipaddress.ip_address(name.split("%")[0]))
    except ValueError:
        return name


def start_server(cluster: ClusterConfig, config: tf.compat.v1.ConfigProto | None = None):
    """Checks the address, then starts this task's tf.compat.v1.train.Server."""
    check_host_resolves(cluster)
    check_port_free(cluster)
    config = config if config is not None else session_config(cluster)
    host, port = split_address(cluster.address, cluster.source)
    try:
        server = tf.compat.v1.train.Server(
            cluster.cluster_spec(),
            job_name=cluster.task_type,
            task_index=cluster.task_index,
            config=config,
            start=True,
        )
    except tf.errors.UnknownError as err:
        # Another process bound the port between check_port_free and here (two launches at once).
        if "Could not start gRPC server" not in err.message:
            raise
        raise PortInUseError(
            f"port {port} of {cluster.device} ({cluster.address}, from {cluster.source}) was taken "
            "between the check and the bind: another process started on it at the same moment"
        ) from None
    log.info("started %s at %s (target %s)", cluster.device, cluster.address, server.target)
    log.warning("%s", security_warning(cluster.device, host, port))
    return server


def security_warning(device: str, host: str, port: int) -> str:
    """What a task says about its open port at start (TensorFlow binds every interface)."""
    if os.environ.get(PRIVATE_NETWORK_ENV) == "1":
        return f"{device} serves on port {port} inside a private network namespace: unreachable from outside it."
    if open_ports.guarded_port() == port:
        return f"{device} serves on port {port}; packet-filter rules admit only loopback and the cluster's hosts."
    exposure = (
        "EVERY interface of this machine, not only the loopback address the cluster names"
        if is_loopback_host(host)
        else "EVERY interface of this machine"
    )
    return (
        f"{device} serves on port {port} of {exposure}, with no authentication or encryption: "
        "anyone who can reach it can run operations in this process (read files, for instance). "
        "Keep the cluster inside a private network (docs/deploy.md)."
    )
