"""A loopback cluster's network namespace: tasks started at once share one, it ends with the last, SIGKILL included.

The members here are small processes that join and wait (no TensorFlow), as any user.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys

import psutil
import pytest

from ps_toolkit.base import paths
from ps_toolkit.network import cluster_netns
from tests import logwatch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Joins the cluster named on the command line, says "joined", then waits for its stdin to close.
MEMBER = (
    "import sys; from ps_toolkit.network import cluster_netns; cluster_netns.join(sys.argv[1]); "
    "print('joined', flush=True); sys.stdin.read()"
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def namespaces_allowed():
    probe = subprocess.run(["unshare", "--user", "--net", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"no unprivileged user + network namespace here: {probe.stderr.strip()}")


def start_member(key: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("PS_TOOLKIT_PRIVATE_NETWORK", None)
    return subprocess.Popen(
        [sys.executable, "-c", MEMBER, key], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )


def joined(member: subprocess.Popen) -> str:
    """The member's network namespace, once it says it joined."""
    line = member.stdout.readline().strip()
    assert line == "joined", f"the member ended instead: exit {member.wait(timeout=30)}"
    return os.readlink(f"/proc/{member.pid}/ns/net")


def keepers(key: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if any(f"{key}.sock" in arg for arg in process.info["cmdline"] or ()):
            found.append(process)
    return found


def end(*members: subprocess.Popen) -> None:
    for member in members:
        if member.poll() is None:
            member.kill()
        member.wait(timeout=30)


def test_tasks_started_at_once_share_one_namespace_that_ends_with_the_last():
    key = cluster_netns.cluster_key([f"127.0.0.1:{secrets.randbelow(50000) + 10000}"])
    members = [start_member(key) for _ in range(4)]  # at once: the lock decides who starts the keeper
    try:
        spaces = {joined(member) for member in members}
        assert len(spaces) == 1 and spaces != {os.readlink("/proc/self/ns/net")}, spaces
        assert len(keepers(key)) == 1
        members[0].send_signal(signal.SIGKILL)  # however a task ends, its connection closes
        members[0].wait(timeout=30)
        late = start_member(key)  # a task joining while others still run gets the same namespace
        members.append(late)
        assert joined(late) in spaces
        for member in members[1:]:
            member.stdin.close()
            assert member.wait(timeout=30) == 0
        logwatch.wait_until(lambda: not keepers(key), 30, "the keeper to end with the last task")
        assert not os.path.exists(os.path.join(paths.state_subdir("netns"), f"{key}.sock"))
    finally:
        end(*members)


def test_two_clusters_get_two_namespaces():
    port = secrets.randbelow(50000) + 10000
    first, second = cluster_netns.cluster_key([f"127.0.0.1:{port}"]), cluster_netns.cluster_key([f"[::1]:{port}"])
    members = [start_member(first), start_member(second)]
    try:
        assert joined(members[0]) != joined(members[1])
    finally:
        end(*members)
