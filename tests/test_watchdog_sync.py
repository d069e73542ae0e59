"""A blocked sync replica's watchdog names what it waits for: the chief's aggregation, and the peer at fault."""

import re
import threading

from ps_toolkit.cluster.config import ClusterConfig
from ps_toolkit.task.roles.trainer import _step_dependency
from ps_toolkit.task.watchdog import ProgressWatchdog
from ps_toolkit.training.config import TrainConfig

PS0, PS1, WORKER0, WORKER1 = "localhost:2001", "localhost:2002", "localhost:2003", "localhost:2004"


def cluster(task_index: int) -> ClusterConfig:
    return ClusterConfig.from_host_flags(
        ps_hosts=f"{PS0},{PS1}", worker_hosts=f"{WORKER0},{WORKER1}", job_name="worker", task_index=task_index
    )


class Peers:
    """A probe whose answers the test sets, up front: no test thread races the watchdog's polls."""

    def __init__(self):
        self.up = {PS0, PS1, WORKER0, WORKER1}
        self._down_for = {}
        self._lock = threading.Lock()

    def __call__(self, address: str) -> bool:
        with self._lock:
            if self._down_for.get(address, 0) > 0:
                self._down_for[address] -= 1
                return False
            return address in self.up

    def down_for(self, address: str, probes: int) -> None:
        """``address`` answers its next ``probes`` probes as down, then as before: a restart, timed by the probes."""
        with self._lock:
            self._down_for[address] = probes


def blocked_replica(task_index: int, peers: Peers, exits: list, exited: threading.Event):
    config = cluster(task_index)
    dog = ProgressWatchdog(
        config,
        timeout_secs=2.0,
        waiting_for="the ps tasks",
        exit_fn=lambda message: (exits.append(message), exited.set()),
        report_fn=lambda line: None,
        probe=peers,
        sync_replicas=True,
    )
    dog.expect(_step_dependency(config, TrainConfig(sync_replicas=True)))
    return dog


def test_a_ps_restarted_while_the_replica_waited_is_named_with_its_times():
    peers, exits, exited = Peers(), [], threading.Event()
    with blocked_replica(1, peers, exits, exited) as dog:
        dog.beat(300)
        peers.down_for(PS1, 2)  # ps:1 killed, and restarted on its port after two probes
        assert exited.wait(timeout=10)
    message = exits[0]
    assert "at global step 300 while waiting for a token from the chief's aggregation" in message, message
    assert "gradients from 2 of 2 replicas" in message, message
    assert re.search(
        r"/job:ps/task:1 \(localhost:2002\) restarted: unreachable from \d\d:\d\d:\d\d UTC, "
        r"answering again since \d\d:\d\d:\d\d UTC",
        message,
    ), message
    assert "every ps" not in message and "/job:ps/task:0" not in message, message


def test_the_chief_names_a_replica_that_does_not_answer():
    peers, exits, exited = Peers(), [], threading.Event()
    peers.up.discard(WORKER1)
    with blocked_replica(0, peers, exits, exited) as dog:
        dog.beat(12)
        assert exited.wait(timeout=10)
    assert "unreachable: the replica /job:worker/task:1 (localhost:2004)" in exits[0], exits[0]


def test_with_every_peer_answering_it_says_a_replica_is_stalled():
    peers, exits, exited = Peers(), [], threading.Event()
    with blocked_replica(1, peers, exits, exited) as dog:
        dog.beat(7)
        assert exited.wait(timeout=10)
    assert exits[0].endswith(
        "every ps and every replica answers and none was seen down while waiting: "
        "a replica is stalled, or a peer restarted within a poll. "
        "Exiting with status 200 (retryable)."
    ), exits[0]
