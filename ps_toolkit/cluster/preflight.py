"""Checks a task can start, made before TensorFlow is imported: port free, hosts resolvable."""

from __future__ import annotations

import errno
import os
import socket

from ps_toolkit.base.errors import ConfigError, PortInUseError
from ps_toolkit.cluster.addresses import split_address
from ps_toolkit.cluster.config import ClusterConfig


def check_port_free(cluster: ClusterConfig) -> None:
    """Fails clearly if this task's port is taken.

    TensorFlow would only say "Could not start gRPC server"; and because gRPC
    sets SO_REUSEPORT, it can even share a port with another gRPC server.
    TensorFlow binds every interface, so that is what is probed.
    """
    _host, port = split_address(cluster.address, cluster.source)
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # Like gRPC, ignore TIME_WAIT leftovers of a previous run on this port: a
    # restarted ps must get its old address back. A live listener still fails.
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        probe.bind(("", port))
    except OSError as err:
        if err.errno == errno.EACCES:  # a privileged port: no retry will ever get it
            raise ConfigError(
                f"port {port} of {cluster.device} ({cluster.address}, from {cluster.source}) "
                f"needs privileges to serve ({err.strerror}): ports below "
                f"{_unprivileged_port_start()} are root's; choose a port from 1024 up"
            ) from None
        if err.errno == errno.EADDRINUSE:
            raise PortInUseError(
                f"port {port} of {cluster.device} ({cluster.address}, from {cluster.source}) "
                f"is already in use: {err.strerror}"
            ) from None
        raise
    finally:
        probe.close()


def _unprivileged_port_start() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_unprivileged_port_start", encoding="ascii") as handle:
            return int(handle.read())
    except (OSError, ValueError):
        return 1024


def check_host_resolves(cluster: ClusterConfig) -> None:
    """Fails clearly if a host of the cluster does not resolve."""
    for job, hosts in cluster.jobs.items():
        for address in hosts:
            host, port = split_address(address, cluster.source)
            try:
                socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except socket.gaierror as err:
                raise ConfigError(
                    f"host {host!r} of /job:{job} (from {cluster.source}) does not resolve: {err.strerror}"
                ) from None


def check_topology(cluster: ClusterConfig, source: str | None = None) -> None:
    """Refuses a cluster whose replicas cannot train together: several replicas and no ps.

    Between-graph replicas share the model only through the ps tasks. Without
    one, each replica places the variables on itself: the chief initializes
    its own copy and every other replica waits forever for its copy to be
    initialized. A single replica trains alone without a ps.
    """
    if cluster.num_ps == 0 and cluster.num_replicas > 1:
        raise ConfigError(
            f"no ps task for {cluster.num_replicas} training replicas (from {source or cluster.source}): "
            "replicas share the model only through ps tasks, so all but the chief would wait forever; "
            "give at least one ps, or train with a single replica"
        )


def check_data_dir(data_dir: str | None) -> None:
    """A --data_dir that is not a folder, refused before TensorFlow's import (seconds) rather than after."""
    if data_dir and not os.path.isdir(data_dir):
        what = "is not a folder" if os.path.exists(data_dir) else "does not exist"
        raise ConfigError(f"data dir {data_dir} (from --data_dir) {what}")


def check_task_can_start(cluster: ClusterConfig) -> None:
    """Every check a server task needs before it binds its port."""
    check_host_resolves(cluster)
    if cluster.task_type != "evaluator":
        check_port_free(cluster)


def connect(address: str, timeout: float = 0.3) -> socket.socket | None:
    """A TCP connection to host:port, or None when nothing accepts one."""
    host, port = split_address(address, "cluster")
    try:
        return socket.create_connection((host, port), timeout=timeout)
    except OSError:
        return None


def reachable(address: str, timeout: float = 0.3) -> bool:
    """True if something accepts TCP connections at host:port."""
    connection = connect(address, timeout)
    if connection is None:
        return False
    connection.close()
    return True
