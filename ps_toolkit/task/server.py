"""One tf.train.Server per task, its per-role session config, and the ps lifecycle.

A parameter server here does not ``join()`` forever. It serves until every
training replica has put a token in its "done" queue (the approach suggested
by TensorFlow's maintainers in tensorflow/tensorflow#4713) and exits 0; if the
replicas disappear and do not come back within a bound, it exits with
EXIT_ORPHANED and says which tasks it waited for.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import queue
import select
import socket
import threading
import time

import tensorflow as tf

from ps_toolkit.base.errors import ConfigError, OrphanedError, PortInUseError
from ps_toolkit.cluster.config import (
    ELASTIC_WORKERS_FROM_ENV,
    PS,
    WORKER,
    ClusterConfig,
    is_loopback_host,
    split_address,
)
from ps_toolkit.cluster.preflight import check_host_resolves, check_port_free, connect, reachable
from ps_toolkit.task import open_ports
from ps_toolkit.task.netns import PRIVATE_NETWORK_ENV

log = logging.getLogger(__name__)

_DONE_QUEUE_CAPACITY = 1 << 16
# How long a replica waits for each ps to accept its "done" token.
_SIGNAL_DONE_TIMEOUT_MS = 10_000
# How long a ps outlives the last done token while a finished replica's process still runs.
REPLICA_EXIT_GRACE_SECS = 10.0


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


def _done_queue(ps_index: int):
    """The queue on one ps that collects one token per finished replica."""
    with tf.device(f"/job:{PS}/task:{ps_index}"):
        return tf.queue.FIFOQueue(
            _DONE_QUEUE_CAPACITY,
            tf.int32,
            shapes=[()],
            shared_name=f"ps_toolkit_done_queue_{ps_index}",
            name=f"done_queue_{ps_index}",
        )


def signal_done(cluster: ClusterConfig, target: str) -> None:
    """Tells every ps that this replica has finished. Bounded; never raises."""
    if not cluster.num_ps:
        return
    graph = tf.Graph()
    with graph.as_default():
        token = tf.constant(cluster.replica_index, tf.int32)
        enqueues = [_done_queue(i).enqueue(token) for i in range(cluster.num_ps)]
    options = tf.compat.v1.RunOptions(timeout_in_ms=_SIGNAL_DONE_TIMEOUT_MS)
    config = session_config(cluster)
    try:
        with tf.compat.v1.Session(target, graph=graph, config=config) as sess:
            sess.run(enqueues, options=options)
    except tf.errors.OpError as err:
        log.warning("%s could not tell the ps it is done: %s", cluster.device, err.message.splitlines()[0])


def serve_until_done(
    cluster: ClusterConfig,
    server,
    *,
    orphan_timeout_secs: float = 300.0,
    poll_secs: float = 0.5,
) -> list[int]:
    """Serves as a ps until every replica signalled done and has exited; returns them in order.

    Raises OrphanedError when no replica that is not done yet has been
    reachable for ``orphan_timeout_secs``.
    """
    with _DoneQueueDrain(cluster, server) as tokens:
        order = _wait_for_replicas(cluster, tokens, orphan_timeout_secs, poll_secs)
    wait_for_replicas_gone(cluster, REPLICA_EXIT_GRACE_SECS)
    return order


def wait_for_replicas_gone(cluster: ClusterConfig, grace_secs: float) -> None:
    """Serves on until no finished replica answers on its port, for at most ``grace_secs``.

    The step that put a replica's done token here ends with cleanup calls to
    every ps, after the token arrived; a ps that exits under them leaves
    TensorFlow's master waiting for them forever when the replica closes its
    session. Once the replica's process has gone, nothing of it can call here.
    """
    addresses = [replicas_address(cluster, task) for task in cluster.replica_tasks()]
    deadline = time.monotonic() + grace_secs
    while time.monotonic() < deadline:
        connections = [sock for sock in map(connect, addresses) if sock is not None]
        if not connections:
            return
        try:
            _wait_until_closed(connections, deadline)
        finally:
            for sock in connections:
                sock.close()
    log.info("%s: a finished replica still answers after %.0fs; exiting", cluster.device, grace_secs)


def _wait_until_closed(connections: list[socket.socket], deadline: float) -> None:
    """Returns when every connection was closed by its peer (its process ended, say), or at ``deadline``."""
    open_ones = list(connections)
    while open_ones:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        readable, _, _ = select.select(open_ones, [], [], remaining)
        for sock in readable:
            try:
                data = sock.recv(4096)  # a server's greeting keeps it open; b"" or an error: closed
            except OSError:
                data = b""
            if not data:
                open_ones.remove(sock)


def awaited_replicas(cluster: ClusterConfig, environ=os.environ) -> list[tuple[str, int]]:
    """The replicas whose done token a ps waits for: all of them, but the elastic workers.

    Raises:
        ConfigError: the elastic bound in ``environ`` is not a whole number of at least 0.
    """
    text = environ.get(ELASTIC_WORKERS_FROM_ENV, "").strip()
    if not text:
        return cluster.replica_tasks()
    if not text.isdigit():
        raise ConfigError(f"{ELASTIC_WORKERS_FROM_ENV}={text!r}: must be a worker index (a whole number)")
    return [(job, index) for job, index in cluster.replica_tasks() if job != WORKER or index < int(text)]


def _wait_for_replicas(cluster: ClusterConfig, tokens: queue.Queue, orphan_timeout_secs, poll_secs) -> list[int]:
    replicas = cluster.replica_tasks()
    pending = {replicas.index(task) for task in awaited_replicas(cluster)}
    order = []
    last_seen = time.monotonic()
    while pending:
        try:
            replica = tokens.get(timeout=poll_secs)
        except queue.Empty:
            if any(reachable(replicas_address(cluster, replicas[i])) for i in pending):
                last_seen = time.monotonic()
            elif time.monotonic() - last_seen > orphan_timeout_secs:
                names = ", ".join(f"/job:{j}/task:{t}" for j, t in (replicas[i] for i in sorted(pending)))
                raise OrphanedError(
                    f"{cluster.device} waited {orphan_timeout_secs:.0f}s for {names} "
                    "to finish, but none was reachable; exiting"
                ) from None
            continue
        if isinstance(replica, Exception):
            raise replica
        if replica in pending:
            pending.discard(replica)
            order.append(replica)
            log.info("%s: replica %d done; %d still running", cluster.device, replica, len(pending))
    return order


class _DoneQueueDrain:
    """A thread that moves done tokens from the TF queue into a Python queue.

    A blocking dequeue wakes the instant a replica finishes. On exit the
    session is closed, which cancels the pending dequeue, and the thread is
    joined: a thread still inside TensorFlow at interpreter exit aborts it.
    """

    def __init__(self, cluster: ClusterConfig, server):
        self.tokens: queue.Queue = queue.Queue()
        graph = tf.Graph()
        with graph.as_default():
            self._dequeue = _done_queue(cluster.task_index).dequeue()
        self._session = tf.compat.v1.Session(server.target, graph=graph, config=session_config(cluster))
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._drain, name="done-queue", daemon=True)

    def _drain(self):
        try:
            while True:
                self.tokens.put(int(self._session.run(self._dequeue)))
        except Exception as err:
            if not self._closing.is_set():
                self.tokens.put(err)  # the main thread raises it

    def __enter__(self) -> queue.Queue:
        self._thread.start()
        return self.tokens

    def __exit__(self, *exc_info):
        self._closing.set()
        self._session.close()
        self._thread.join(timeout=10)


def replicas_address(cluster: ClusterConfig, task: tuple[str, int]) -> str:
    job, index = task
    return cluster.jobs[job][index]
