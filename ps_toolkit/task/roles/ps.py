"""The ps loop: serve until every training replica has said it is done, then exit 0.

A parameter server here does not ``join()`` forever. It serves until every
training replica has put a token in its "done" queue (the approach suggested
by TensorFlow's maintainers in tensorflow/tensorflow#4713) and exits 0; if the
replicas disappear and do not come back within a bound, it exits with
EXIT_ORPHANED and says which tasks it waited for. ``signal_done`` is the
replicas' side of that protocol.
"""

from __future__ import annotations

import logging
import os
import queue
import select
import socket
import threading
import time

import tensorflow as tf

from ps_toolkit.base.errors import PS_ORPHAN_TIMEOUT_SECS, ConfigError, OrphanedError
from ps_toolkit.cluster.config import ELASTIC_WORKERS_FROM_ENV, PS, WORKER, ClusterConfig
from ps_toolkit.cluster.preflight import connect, reachable
from ps_toolkit.dynamic_embedding import ps_memory, row_bounds
from ps_toolkit.task.server import session_config

log = logging.getLogger(__name__)

_DONE_QUEUE_CAPACITY = 1 << 16
# How long a replica waits for each ps to accept its "done" token.
_SIGNAL_DONE_TIMEOUT_MS = 10_000
# How long a ps outlives the last done token while a finished replica's process still runs.
REPLICA_EXIT_GRACE_SECS = 10.0


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


class DoneSignalHook(tf.compat.v1.train.SessionRunHook):
    """Puts this replica's done token in every ps's queue through the training session, as its last
    hook's ``end``: before that session closes, while its master is known to answer.

    A new session made for the token after the training session's close can
    wait on the same slow peer that held the close. ``sent`` says whether the
    token went; if not (no ps, an error, a session that ended on an error),
    ``signal_done`` is the fallback.
    """

    def __init__(self, cluster: ClusterConfig):
        self._cluster = cluster
        self._enqueues = None
        self.sent = False

    def begin(self):
        if self._cluster.num_ps:
            token = tf.constant(self._cluster.replica_index, tf.int32)
            self._enqueues = [_done_queue(i).enqueue(token) for i in range(self._cluster.num_ps)]

    def end(self, session):
        if self._enqueues is None:
            return
        options = tf.compat.v1.RunOptions(timeout_in_ms=_SIGNAL_DONE_TIMEOUT_MS)
        try:
            session.run(self._enqueues, options=options)
            self.sent = True
        except tf.errors.OpError as err:
            log.info("%s: the training session could not send the done token: %s", self._cluster.device, err.message)


def signal_done(cluster: ClusterConfig, target: str) -> None:
    """Tells every ps that this replica has finished, through a session of its own. Bounded; never raises."""
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


def publish_memory(cluster: ClusterConfig, server, memory: int) -> None:
    """Writes the memory this ps counts as its own where the chief's table maintenance reads it, and says it."""
    ps_memory.publish(server.target, f"/job:{PS}/task:{cluster.task_index}", memory, session_config(cluster))
    given = bool(os.environ.get(ps_memory.MEMORY_ENV, "").strip())
    source = f"from {ps_memory.MEMORY_ENV}" if given else f"measured; {ps_memory.MEMORY_ENV} sets another"
    log.info(
        "%s counts %s MB of memory as its own (%s): a dynamic table without max_rows_per_shard is "
        "bounded by default so that its tables' rows take at most %.0f%% of it",
        cluster.device,
        f"{memory // ps_memory.MB:,}",
        source,
        100 * row_bounds.MEMORY_SHARE,
    )


def serve_until_done(
    cluster: ClusterConfig,
    server,
    *,
    orphan_timeout_secs: float = PS_ORPHAN_TIMEOUT_SECS,
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
