"""Isolation with forked tasks: the launcher's fork server and every task it forks live in the private namespace.

tests/test_isolation.py runs tests/fixtures/listening_task.py as a plain command
(exec); here it runs through scripts/run_legacy.py, which the launcher forks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests import test_isolation
from tests.test_isolation import launch  # noqa: F401 - the fixture the tests below use

ROOT = test_isolation.ROOT
RUN_LEGACY = os.path.join(ROOT, "scripts", "run_legacy.py")
INTO_NETNS = os.path.join(ROOT, "tests", "fixtures", "fork_into_netns.py")

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(autouse=True)
def through_the_fork_server(monkeypatch):
    monkeypatch.setattr(test_isolation, "TASK_COMMAND", [sys.executable, RUN_LEGACY, test_isolation.LISTENING_TASK])


FORKED = (
    "test_ports_answer_inside_the_namespace_only",
    "test_isolation_none_keeps_plain_loopback",
    "test_sigkill_of_the_launcher_leaves_no_task_and_no_namespace",
)
globals().update({name: getattr(test_isolation, name) for name in FORKED})


def test_a_task_forked_by_a_server_outside_the_namespace_joins_its_clients_namespace():
    """The server started before its client entered a namespace; the child setns()es into the client's."""
    done = subprocess.run([sys.executable, INTO_NETNS], capture_output=True, text=True, timeout=120, cwd=ROOT)
    if done.returncode == 3:
        test_isolation.skip_unless_root(done.stderr.strip())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["client_before"] != seen["client_after"], seen
    assert seen["task"] == seen["client_after"] and seen["server"] == seen["client_before"], seen
