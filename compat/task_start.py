"""The task start-up of every entry point, for the servers old scripts create (tf.train.Server, estimator roles).

An old script's ``tf.train.Server`` goes through ``ps_toolkit.task.startup``
before it binds its port, as a ``run_task.py`` task does: its process is
titled after its role, ``kill -USR1`` dumps its stacks, and its port is kept
private (the loopback cluster's own network namespace, the packet-filter
rules, or a refusal unless ``--allow_open_ports``'s variable
PS_TOOLKIT_ALLOW_OPEN_PORTS=1 says the open port is intended). Only the
checks TensorFlow itself makes are made: a script's cluster that TF 1.x
accepted is still accepted. An in-process server (one task, port 0 as
``create_local_server`` uses) has no peers and is left as TensorFlow starts it.
"""

from __future__ import annotations

import dataclasses
import threading

import tensorflow as tf

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.cluster.addresses import split_address
from ps_toolkit.task import startup

_SOURCE = "the script's tf.train.Server"


@dataclasses.dataclass(frozen=True)
class ServedTask:
    """The part of a ClusterConfig the start-up reads, for any job names a script uses."""

    jobs: dict[str, tuple[str, ...]]
    task_type: str
    task_index: int
    source: str = _SOURCE

    @property
    def device(self) -> str:
        return f"/job:{self.task_type}/task:{self.task_index}"

    @property
    def address(self) -> str:
        return self.jobs[self.task_type][self.task_index]


def served_task(server_or_cluster_def, job: str | None, index: int | None) -> ServedTask | None:
    """The task a Server will serve, with its cluster; None for an in-process or malformed one (TF reports it)."""
    if job is None or index is None:
        return None
    try:
        if isinstance(server_or_cluster_def, tf.train.ServerDef):
            server_or_cluster_def = server_or_cluster_def.cluster
        spec = tf.train.ClusterSpec(server_or_cluster_def).as_dict()
        jobs = {name: tuple(t.values() if isinstance(t, dict) else t) for name, t in spec.items()}
        task = ServedTask(jobs, job, int(index))
        addresses = [a for hosts in jobs.values() for a in hosts]
        for address in addresses:
            split_address(address, _SOURCE)
        task.address  # noqa: B018 (an index out of range: TensorFlow reports it)
    except (ConfigError, TypeError, ValueError, AttributeError, KeyError, IndexError):
        return None
    return task if len(addresses) > 1 else None


def begin_server(server_or_cluster_def, job: str | None, index: int | None) -> None:
    """The start-up, before TensorFlow binds the port; a refusal raises ConfigError (one line, exit 2)."""
    task = served_task(server_or_cluster_def, job, index)
    if task is not None:
        startup.begin(task, checks=False)


def install() -> None:
    """Every tf.train.Server of this process goes through the start-up first, and its ``join()``
    answers Ctrl-C: ``tf.train.Server``, ``tf.compat.v1.train.Server`` and ``tf.distribute.Server``
    are one TensorFlow class."""
    server_class = tf.distribute.Server
    if getattr(server_class.__init__, "_ps_toolkit_start_up", False):
        return
    original = server_class.__init__

    def __init__(self, server_or_cluster_def, job_name=None, task_index=None, *args, **kwargs):
        from ps_toolkit_compat import task_context  # it imports this module

        job, index = task_context.task_of_server(server_or_cluster_def, job_name, task_index)
        begin_server(server_or_cluster_def, job, index)
        original(self, server_or_cluster_def, job_name, task_index, *args, **kwargs)

    def join(self):
        """Serves forever, as in TF 1.x, in a wait Ctrl-C ends (TensorFlow's own join() is deaf to it)."""
        from ps_toolkit_compat import task_context

        task_context.say_how_a_ps_ends(self.server_def.job_name, self.server_def.task_index)
        wait_forever()

    __init__._ps_toolkit_start_up = True
    server_class.__init__ = __init__
    server_class.join = join


def wait_forever() -> None:
    """``Server.join()``: blocks for good, in a wait Ctrl-C (SIGINT) interrupts."""
    threading.Event().wait()
