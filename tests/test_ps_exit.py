"""A ps that has every done token still serves while a finished replica's process runs (bounded).

The replica's done step ends with cleanup calls to every ps after the token
arrived; a ps gone under them leaves the replica's session close waiting
forever. These tests stand a listening socket in for the replica's server.
"""

import socket
import threading
import time

from ps_toolkit.cluster.config import ClusterConfig
from ps_toolkit.task.roles.ps import wait_for_replicas_gone


def _listening_socket() -> socket.socket:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    return listener


def _cluster(replica_port: int) -> ClusterConfig:
    # The ps's own address is never probed: any port that is not the replica's serves.
    return ClusterConfig(
        jobs={"ps": ["localhost:1"], "worker": [f"localhost:{replica_port}"]},
        task_type="ps",
        task_index=0,
        source="test",
    )


def test_the_ps_waits_until_the_finished_replica_has_gone():
    listener = _listening_socket()
    closed = threading.Event()

    def replica_exits():
        closed.set()  # first: the close wakes the ps's wait, which may return before this thread runs again
        listener.close()

    timer = threading.Timer(0.5, replica_exits)
    timer.start()
    try:
        started = time.monotonic()
        wait_for_replicas_gone(_cluster(listener.getsockname()[1]), grace_secs=30)
        assert closed.is_set(), "the ps stopped waiting while the replica still served"
        assert time.monotonic() - started < 10
    finally:
        timer.cancel()
        listener.close()


def test_the_wait_for_a_replica_that_stays_is_bounded():
    listener = _listening_socket()
    try:
        started = time.monotonic()
        wait_for_replicas_gone(_cluster(listener.getsockname()[1]), grace_secs=0.5)
        waited = time.monotonic() - started
        assert 0.5 <= waited < 5, waited
    finally:
        listener.close()


def test_a_replica_already_gone_costs_no_wait():
    listener = _listening_socket()
    port = listener.getsockname()[1]
    listener.close()
    started = time.monotonic()
    wait_for_replicas_gone(_cluster(port), grace_secs=30)
    assert time.monotonic() - started < 5
