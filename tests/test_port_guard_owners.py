"""Port-guard rules are owned, not guessed (network.port_guard): each guardian's rules carry its owner id, only
it removes them, it outlives a kill of its task's whole tree, and the rules of dead owners go at the next start.

Root and iptables only; each test works in a network namespace of its own, so the host's INPUT chain is untouched.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import psutil
import pytest

from ps_toolkit.process import lifecycle
from tests.netns_helpers import Namespaces

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TASK = os.path.join(ROOT, "tests", "fixtures", "guarded_task.py")
PORT = 24410
BOUND_SECS = 60

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("iptables") is None, reason="packet-filter rules need root and iptables"
    ),
]


@pytest.fixture
def space():
    made = Namespaces(1).create()
    try:
        yield made
    finally:
        made.remove()


def rules(space) -> list[str]:
    done = subprocess.run(space.command(0, "iptables", "-S", "INPUT"), capture_output=True, text=True, timeout=20)
    return [line for line in done.stdout.splitlines() if "ps_toolkit port " in line]


def start_task(space, port: int = PORT) -> tuple[subprocess.Popen, str]:
    """A guarded task in the namespace; (its process, its guardian's owner id)."""
    task = subprocess.Popen(
        space.command(0, sys.executable, TASK, str(port)),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    line = task.stdout.readline()
    assert line.startswith("guarded "), line
    return task, line.split()[1]


def guardian(owner: str) -> psutil.Process:
    return psutil.Process(int(owner.split(".")[0]))


def end(task: subprocess.Popen) -> None:
    if task.poll() is None:
        task.stdin.close()
    task.wait(timeout=BOUND_SECS)
    task.stdout.close()


def test_an_old_guardian_resumed_after_a_new_task_took_its_port_removes_only_its_own_rules(space):
    old, old_owner = start_task(space)
    old_guardian = guardian(old_owner)
    old_guardian.suspend()
    try:
        lifecycle.kill_tree(old)  # the old task ends while its guardian is paused
        old.wait(timeout=BOUND_SECS)
        new, new_owner = start_task(space)
    finally:
        old_guardian.resume()
    old_guardian.wait(timeout=BOUND_SECS)  # it saw its pipe end and removed its rules
    try:
        left = rules(space)
        assert left and all(f"owner {new_owner}" in line for line in left), left
        assert any(line.endswith("-j DROP") for line in left), left
    finally:
        end(new)
        old.stdout.close()
    assert rules(space) == []


def test_a_guardian_outlives_a_sigkill_of_its_tasks_whole_tree_and_then_removes_its_rules(space):
    """What the launcher's --kill drill does: SIGKILL to the task's group and every descendant."""
    task, owner = start_task(space)
    keeper = guardian(owner)
    assert keeper.pid not in {p.pid for p in psutil.Process(task.pid).children(recursive=True)}
    lifecycle.kill_tree(task, signal.SIGKILL)
    assert task.wait(timeout=BOUND_SECS) == -signal.SIGKILL
    task.stdout.close()
    keeper.wait(timeout=BOUND_SECS)
    assert rules(space) == []


def test_rules_of_dead_owners_on_any_port_go_at_the_next_start_and_live_ones_stay(space):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(timeout=BOUND_SECS)
    stale = [f"ps_toolkit port {PORT + 7} owner {dead.pid}.1", f"ps_toolkit port {PORT} owner 999999999.5"]
    for comment in stale:
        spec = ["-p", "tcp", "--dport", comment.split()[2], "-m", "comment", "--comment", comment, "-j", "DROP"]
        subprocess.run(space.command(0, "iptables", "-I", "INPUT", *spec), check=True, timeout=20)
    live, live_owner = start_task(space, PORT + 3)
    task, owner = start_task(space)
    try:
        left = rules(space)
        assert all(f"owner {owner}" in line or f"owner {live_owner}" in line for line in left), left
        assert any(f"owner {live_owner}" in line for line in left), left
    finally:
        end(task)
        end(live)
    assert rules(space) == []
