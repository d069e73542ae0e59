"""The launcher's teardown, restart, drill and signal tests again, with every task forked from its fork server.

tests/test_launcher.py runs tests/fixtures/fake_task.py as a plain command (exec).
Here the same fake task runs through scripts/run_legacy.py, which the launcher
starts from its fork server, so the Supervisor stops, restarts, drills and reaps
forked tasks: processes that are not its own children.
"""

from __future__ import annotations

import os
import sys

import pytest

from tests import test_launcher
from tests.test_launcher import background  # noqa: F401 - the fixture the tests below use

RUN_LEGACY = os.path.join(test_launcher.ROOT, "scripts", "run_legacy.py")


@pytest.fixture(autouse=True)
def through_the_fork_server(monkeypatch):
    monkeypatch.setattr(test_launcher, "TASK_COMMAND", [sys.executable, RUN_LEGACY, test_launcher.FAKE_TASK])


FORKED = (
    "test_worker_failure_tears_down_the_cluster_and_names_the_task",
    "test_tasks_that_ignore_sigterm_are_killed",
    "test_timeout_stops_everything",
    "test_on_failure_restarts_the_task_in_place",
    "test_restarts_are_bounded",
    "test_config_errors_are_not_restarted",
    "test_kill_drill_with_restart_brings_the_ps_back",
    "test_kill_drill_without_restart_fails_the_run",
    "test_signal_to_the_launcher_stops_every_task",
    "test_sigkill_of_the_launcher_leaves_no_orphans",
    "test_port_in_use_relaunches_the_cluster_on_new_ports",
    "test_command_mode_appends_cluster_flags_and_sets_tf_config",
)
globals().update({name: getattr(test_launcher, name) for name in FORKED})
