"""The memory a ps counts as its own for its dynamic tables, and how the chief learns it.

A ps measures its memory at start (``memory_of_this_host``): the machine's
physical memory, or its cgroup's limit where lower (a container), shared
equally by the ps tasks the cluster puts on the same host; or
``PS_TOOLKIT_PS_MEMORY_MB`` where set. It writes that figure in a small
hash table on its own device under a shared name (``publish``), where the
chief's table maintenance reads it (``read``): the chief's own machine says
nothing of a ps's. A ps that has not written it yet reads 0 (unknown). A
table on a device of no ps (one local shard, a device list of the user's)
counts the memory of the process that builds the graph.
"""

from __future__ import annotations

import os
import re

import psutil
import tensorflow as tf

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.dynamic_embedding.hash_tables import on_device

MEMORY_ENV = "PS_TOOLKIT_PS_MEMORY_MB"
MB = 1 << 20
MAX_MB = (2**63 - 1) // MB  # the most MB whose bytes an int64 holds
# cgroup v2, then v1: a container's memory limit ("max" or a huge figure: no limit).
_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
_SHARED_NAME = "ps_toolkit_ps_memory"
_KEY = 0


def memory_of_this_host(addresses: list[str] | None = None, index: int = 0, environ=os.environ) -> int:
    """The bytes the ps ``addresses[index]`` (or this process, without addresses) counts as its own.

    Args:
        addresses: The cluster's ps addresses (host:port); the ps on this one's host share its memory.
        index: This ps's index in ``addresses``.
        environ: Where ``PS_TOOLKIT_PS_MEMORY_MB`` is read.

    Raises:
        ConfigError: ``PS_TOOLKIT_PS_MEMORY_MB`` is not a whole number of MB of at least 1.
    """
    text = environ.get(MEMORY_ENV, "").strip()
    if text:
        # ASCII digits only (str.isdigit takes "²"), and bytes that an int64 holds (the figure is a tensor).
        if not re.fullmatch(r"[0-9]+", text) or not 1 <= int(text) <= MAX_MB:
            raise ConfigError(f"{MEMORY_ENV}={text!r}: must be a whole number of MB from 1 to {MAX_MB:,}")
        return int(text) * MB
    memory = psutil.virtual_memory().total
    limit = _cgroup_limit()
    if limit is not None:
        memory = min(memory, limit)
    return memory // _tasks_on_host(addresses, index)


def _cgroup_limit() -> int | None:
    for path in _CGROUP_LIMITS:
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:
            return int(text)
    return None


def _tasks_on_host(addresses: list[str] | None, index: int) -> int:
    if not addresses:
        return 1
    host = addresses[index].rsplit(":", 1)[0]
    return sum(1 for address in addresses if address.rsplit(":", 1)[0] == host)


def _memory_table(device: str | None):
    with on_device(device):
        return tf.raw_ops.MutableHashTableV2(
            key_dtype=tf.int64,
            value_dtype=tf.int64,
            shared_name=_SHARED_NAME,
            use_node_name_sharing=False,
            name="ps_memory",
        )


def read(device: str | None) -> tf.Tensor:
    """The memory the ps of ``device`` published (int64 scalar; 0 until it has)."""
    table = _memory_table(device)
    with on_device(device):
        found = tf.raw_ops.LookupTableFindV2(
            table_handle=table, keys=tf.constant([_KEY], tf.int64), default_value=tf.constant(0, tf.int64)
        )
        return found[0]


def publish_op(device: str | None, memory: int) -> tf.Operation:
    """The op writing ``memory`` (bytes) where ``read(device)`` finds it."""
    table = _memory_table(device)
    with on_device(device):
        return tf.raw_ops.LookupTableInsertV2(
            table_handle=table, keys=tf.constant([_KEY], tf.int64), values=tf.constant([memory], tf.int64)
        )


def publish(target: str, device: str, memory: int, config=None) -> None:
    """Runs ``publish_op`` through a session of its own on ``target`` (the ps's own server)."""
    graph = tf.Graph()
    with graph.as_default():
        insert = publish_op(device, memory)
    with tf.compat.v1.Session(target, graph=graph, config=config) as session:
        session.run(insert)


def publishes(device: str | None) -> bool:
    """Whether ``device`` is a ps task's, which publishes its memory; any other is this process's host's."""
    return device is not None and tf.DeviceSpec.from_string(device).job == "ps"
