"""Several hosts on one machine: one network namespace per task, wired to a bridge, running a real cluster.

Root only. Every task has its own IP address in 10.213.0.0/24 and serves on
port 2222, as on separate machines; the bridge lives in a namespace of its
own, so nothing is added to the machine's own network. Latency (tc netem) and
a bandwidth limit (tc tbf) are added where the kernel has them.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import sys

import pytest

from ps_toolkit.network.port_guard import ALLOW_OPEN_PORTS_ENV
from tests.netns_helpers import Namespaces, qdisc_support
from tests.taskrun import RUN_TASK, TRAINED_ACCURACY, assert_cluster_trained, run_tasks

pytestmark = [
    pytest.mark.slow,
    pytest.mark.root,
    pytest.mark.timeout(180),
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
    pytest.mark.skipif(shutil.which("ip") is None, reason="iproute2 ('ip') is not installed"),
]

# A fresh port per cluster: the last cluster's connections linger in TIME_WAIT on
# its port, and run_task.py's preflight bind probe would call the port taken.
PORTS = itertools.count(2222)
TASKS = (("ps", 0), ("worker", 0), ("worker", 1))
TRAIN_STEPS = 150
# On a shaped link every step waits on the network: fewer steps still show training completes there.
SHAPED_TRAIN_STEPS = 60
# After 60 async steps of two replicas each replica's evaluation gave 0.70-0.92 test accuracy (seven
# runs): well above chance (0.1) is what shows they trained; the accuracy after 150 steps is checked
# unshaped.
SHAPED_MIN_ACCURACY = 0.5
CLUSTER_TIMEOUT_SECS = 150


@pytest.fixture(scope="module")
def namespaces():
    spaces = Namespaces(len(TASKS))
    try:
        yield spaces.create()
    finally:
        spaces.remove()


def fresh_addresses(spaces: Namespaces) -> list[str]:
    """host:port of every task, all on one new port, as a cluster of separate machines would be."""
    port = next(PORTS)
    return [f"{address}:{port}" for address in spaces.addresses]


def run_cluster(
    spaces: Namespaces, tmp_path, *, addresses: list[str], envs=None, flags=(), train_steps: int = TRAIN_STEPS
) -> dict:
    """Runs ps 0, worker 0, worker 1, each in its own namespace, until they end by themselves."""
    hosts = {"ps": addresses[:1], "worker": addresses[1:]}
    common = [f"--checkpoint_dir={tmp_path}/ckpt", f"--train_steps={train_steps}", "--ps_orphan_timeout_secs=60"]
    commands = {}
    for index, (job, task) in enumerate(TASKS):
        cluster_flags = [] if envs else [f"--{j}_hosts={','.join(h)}" for j, h in hosts.items()]
        task_flags = [] if envs else [f"--job_name={job}", f"--task_index={task}"]
        commands[f"{job}:{task}"] = spaces.command(
            index, sys.executable, RUN_TASK, *cluster_flags, *task_flags, *common, *flags
        )
    # Tasks on real hosts guard their ports as they do by default (the suite's conftest opens them elsewhere).
    return run_tasks(commands, timeout=CLUSTER_TIMEOUT_SECS, env={ALLOW_OPEN_PORTS_ENV: "0"}, envs=envs)


def check_trained(outcomes: dict, train_steps: int = TRAIN_STEPS, min_accuracy: float = TRAINED_ACCURACY) -> float:
    """Asserts every task ended with 0 and the workers reached the last step; returns the chief's steps/s."""
    assert_cluster_trained(outcomes, train_steps, min_accuracy)
    progress = outcomes["worker:0"].progress()
    if len(progress) >= 2 and progress[-1]["time"] > progress[0]["time"]:
        return (progress[-1]["global_step"] - progress[0]["global_step"]) / (progress[-1]["time"] - progress[0]["time"])
    result = outcomes["worker:0"].result()
    return result["global_step"] / result["seconds"]


@pytest.fixture(scope="module")
def baseline_rate(namespaces, tmp_path_factory):
    """Steps/s of the unshaped cluster, measured once for the shaped runs to compare with."""
    outcomes = run_cluster(namespaces, tmp_path_factory.mktemp("baseline"), addresses=fresh_addresses(namespaces))
    return outcomes, check_trained(outcomes)


def test_one_ps_two_workers_on_three_hosts(baseline_rate, namespaces):
    outcomes, rate = baseline_rate
    # Each task served on its own non-loopback address, and said how its port is fenced.
    for outcome in outcomes.values():
        assert "packet-filter rules admit only loopback and the cluster's hosts" in outcome.stderr, outcome.describe()
    print(f"\n[netns] 1 ps + 2 workers on {', '.join(namespaces.addresses)}: {rate:.1f} steps/s")


SHAPES = {
    "20 ms latency (netem)": ["netem", "delay", "20ms"],
    # At most ~8 steps/s: every step pulls the 31 KB of softmax weights through the ps link.
    "2 Mbit/s (tbf)": ["tbf", "rate", "2mbit", "burst", "32kb", "latency", "400ms"],
}


@pytest.mark.parametrize("label", list(SHAPES))
def test_training_completes_on_a_shaped_network(label, baseline_rate, namespaces, tmp_path):
    qdisc = SHAPES[label]
    reason = qdisc_support(qdisc)
    if reason:
        pytest.skip(f"{label}: this kernel cannot shape traffic that way: {reason}")
    _, base = baseline_rate
    namespaces.shape(qdisc)
    try:
        outcomes = run_cluster(
            namespaces, tmp_path, addresses=fresh_addresses(namespaces), train_steps=SHAPED_TRAIN_STEPS
        )
    finally:
        namespaces.unshape()
    rate = check_trained(outcomes, SHAPED_TRAIN_STEPS, SHAPED_MIN_ACCURACY)
    accuracy = ", ".join(f"{outcomes[name].result()['test_accuracy']:.3f}" for name in ("worker:0", "worker:1"))
    print(f"\n[netns] {label} on every host's link: {rate:.1f} steps/s (unshaped: {base:.1f}), accuracy {accuracy}")


def test_kubeflow_tf_config_with_service_dns_names(namespaces, tmp_path):
    """TF_CONFIG exactly as the Kubeflow operator writes it: per-pod Service names, port 2222, 'cloud'."""
    names = {"mnist-ps-0.default.svc": namespaces.addresses[0]}
    names.update({f"mnist-worker-{i}.default.svc": namespaces.addresses[i + 1] for i in range(2)})
    namespaces.set_hosts(names)
    # The operator gives every replica port 2222; a fresh port here, for the reason PORTS says.
    port = next(PORTS)
    cluster = {
        "ps": [f"mnist-ps-0.default.svc:{port}"],
        "worker": [f"mnist-worker-{i}.default.svc:{port}" for i in range(2)],
    }
    envs = {}
    for job, task in TASKS:
        # Go's json.Marshal of the operator's TFConfig struct: compact, fields in declaration order.
        payload = {"cluster": cluster, "task": {"type": job, "index": task}, "environment": "cloud"}
        envs[f"{job}:{task}"] = {"TF_CONFIG": json.dumps(payload, separators=(",", ":"))}
    outcomes = run_cluster(namespaces, tmp_path, addresses=[], envs=envs)
    check_trained(outcomes)
