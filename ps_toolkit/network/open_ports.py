"""A task's decision about its open port: private namespace, guarded, explicitly open, or refused.

Called before the task binds its port (see port_guard.py for the rules).
Loopback-only clusters admit loopback only; multi-host clusters admit loopback
and the resolved addresses of every host the cluster names, because their
tasks must reach each other and nothing else needs to.
"""

from __future__ import annotations

import logging
import os

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.cluster.addresses import is_loopback_host, split_address
from ps_toolkit.cluster.config import EVALUATOR, ClusterConfig
from ps_toolkit.network.netns import PRIVATE_NETWORK_ENV
from ps_toolkit.network.port_guard import ALLOW_OPEN_PORTS_ENV, GuardUnavailable, PortGuard

log = logging.getLogger(__name__)

# The guard of this process's port: referenced here so that its pipe stays open until the process ends.
_ACTIVE: list[PortGuard] = []


def open_ports_allowed(flag_value: bool) -> bool:
    return bool(flag_value) or os.environ.get(ALLOW_OPEN_PORTS_ENV) == "1"


def guard_task_port(cluster: ClusterConfig, allow_open_ports: bool) -> str:
    """Guards this task's port, or refuses with ConfigError; returns what was done, in a few words."""
    if cluster.task_type == EVALUATOR:
        return "no port"  # the evaluator serves nothing
    _host, port = split_address(cluster.address, cluster.source)
    if os.environ.get(PRIVATE_NETWORK_ENV) == "1":
        return "in a private network namespace"
    if open_ports_allowed(allow_open_ports):
        return "open on every interface (--allow_open_ports)"
    hosts = sorted({split_address(a, cluster.source)[0] for addresses in cluster.jobs.values() for a in addresses})
    try:
        _ACTIVE.append(PortGuard.start(port, hosts))
    except GuardUnavailable as err:
        raise ConfigError(
            f"{cluster.device} would serve port {port} on every interface without authentication, "
            f"and cannot limit it to the cluster ({err}); run it under scripts/launch_local.py "
            f"(private namespace) or as root with iptables, or pass --allow_open_ports "
            f"({ALLOW_OPEN_PORTS_ENV}=1) if the network is private"
        ) from None
    admitted = "loopback" if hosts and all(is_loopback_host(h) for h in hosts) else "loopback and the cluster's hosts"
    return f"guarded: {admitted} only"


def guarded_port() -> int | None:
    """The port this process guards, if any."""
    return _ACTIVE[-1].port if _ACTIVE else None


def release() -> None:
    """Removes this process's rules now (they also go when the process ends)."""
    while _ACTIVE:
        _ACTIVE.pop().release()
