"""A blocked sync replica's watchdog names what it waits for: the chief's aggregation, and the peer at fault."""

import re
import threading

from ps_toolkit.cluster.config import ClusterConfig
from ps_toolkit.task.monitored_training import _step_dependency
from ps_toolkit.task.watchdog import ProgressWatchdog
from ps_toolkit.training.config import TrainConfig

PS0, PS1, WORKER0, WORKER1 = "localhost:2001", "localhost:2002", "localhost:2003", "localhost:2004"


def cluster(task_index: int) -> ClusterConfig:
    return ClusterConfig.from_host_flags(
        ps_hosts=f"{PS0},{PS1}", worker_hosts=f"{WORKER0},{WORKER1}", job_name="worker", task_index=task_index
    )


class Peers:
    """A probe whose answers the test sets; it counts probes so that the test can wait for the watchdog's."""

    def __init__(self):
        self.up = {PS0, PS1, WORKER0, WORKER1}
        self._probes = {}
        self._changed = threading.Condition()

    def __call__(self, address: str) -> bool:
        with self._changed:
            self._probes[address] = self._probes.get(address, 0) + 1
            self._changed.notify_all()
            return address in self.up

    def wait_probed(self, address: str, times: int = 2, timeout: float = 10.0) -> None:
        """Waits until ``address`` has been probed ``times`` more times than now."""
        with self._changed:
            target = self._probes.get(address, 0) + times
            assert self._changed.wait_for(lambda: self._probes.get(address, 0) >= target, timeout=timeout)


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
        peers.up.discard(PS1)  # ps:1 killed
        peers.wait_probed(PS1)
        peers.up.add(PS1)  # and restarted on its port
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
