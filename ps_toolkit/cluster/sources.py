"""Cluster sources by name: where a task learns its cluster and its own place in it (Slurm, TF_CONFIG, a user's own).

A source is a function ``source(environ, options)`` that returns the task's
``ClusterConfig``: ``environ`` is the task's environment, ``options`` the
values of the task's cluster flags (``slurm_num_ps``, ``slurm_port_base``,
``slurm_roles``...). ``--cluster_from=NAME`` picks one; without it the cluster
comes from the host flags, ``--cluster_file`` or TF_CONFIG (``config.resolve``).

    from ps_toolkit.cluster import sources

    def from_my_scheduler(environ, options):
        hosts = environ["MY_SCHEDULER_HOSTS"].split(",")
        return ClusterConfig.from_host_flags(ps_hosts=hosts[0], worker_hosts=",".join(hosts[1:]),
                                             job_name=environ["MY_ROLE"], task_index=int(environ["MY_INDEX"]))

    sources.register_source("my_scheduler", from_my_scheduler)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ps_toolkit.base import user_calls
from ps_toolkit.base.errors import ConfigError
from ps_toolkit.base.registry import Registry
from ps_toolkit.cluster import slurm
from ps_toolkit.cluster.config import ClusterConfig
from ps_toolkit.cluster.tf_config import TF_CONFIG_ENV, tf_config_text

ClusterSource = Callable[[Mapping[str, str], Mapping[str, object]], ClusterConfig]


def _from_slurm(environ: Mapping[str, str], options: Mapping[str, object]) -> ClusterConfig:
    """The cluster of the srun step this task runs in (``slurm.cluster_from_slurm_env``)."""
    return slurm.cluster_from_slurm_env(
        environ,
        options.get("slurm_num_ps", 1),
        options.get("slurm_port_base", slurm.DEFAULT_BASE_PORT),
        options.get("slurm_roles"),
    )


def _from_tf_config(environ: Mapping[str, str], options: Mapping[str, object]) -> ClusterConfig:
    """TF_CONFIG's cluster and task (estimator, Kubeflow)."""
    text = tf_config_text(environ)
    if text is None:
        raise ConfigError(f"{TF_CONFIG_ENV} is not set: the tf_config cluster source reads the cluster from it")
    return ClusterConfig.from_tf_config(text)


SOURCES = Registry(
    "cluster source", "--cluster_from", "(environ, options)", {"slurm": _from_slurm, "tf_config": _from_tf_config}
)
BUILT_IN_SOURCES = SOURCES.built_in


def register_source(name: str, source: ClusterSource) -> None:
    """Makes ``source`` the cluster source called ``name`` (``--cluster_from=name``).

    Args:
        name: The source's name; a built-in name cannot be taken.
        source: ``source(environ, options)`` returning the task's ClusterConfig; raises ConfigError on bad input.

    Raises:
        ValueError: ``name`` is empty or a built-in source's, or ``source`` is not callable.
    """
    SOURCES.register(name, source)


def cluster_from_source(
    name: str, environ: Mapping[str, str], options: Mapping[str, object] | None = None
) -> ClusterConfig:
    """The cluster the source registered as ``name`` finds in ``environ``.

    Raises:
        ConfigError: ``name`` is not registered, the source found no usable cluster, raised, or returned
            something other than a ClusterConfig.
    """
    source = SOURCES.get(name)
    if name in SOURCES.built_in:
        cluster = source(environ, dict(options or {}))
    else:
        cluster = user_calls.call(source, f"--cluster_from={name}", environ, dict(options or {}))
    if not isinstance(cluster, ClusterConfig):
        raise ConfigError(f"--cluster_from={name}: the source returned {type(cluster).__name__}, not a ClusterConfig")
    return cluster
