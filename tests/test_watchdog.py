"""A task that cannot reach a ps or the chief says so itself, early and at a steady interval, before the watchdog."""

import re
import threading
import time

import pytest

from ps_toolkit.cluster.config import ClusterConfig
from ps_toolkit.task.watchdog import ProgressWatchdog
from tests.taskrun import RUN_TASK, python_command, run_tasks


def worker(task_index: int) -> ClusterConfig:
    return ClusterConfig.from_host_flags(
        ps_hosts="localhost:2001",
        worker_hosts="localhost:2002,localhost:2003",
        job_name="worker",
        task_index=task_index,
    )


class Reports:
    """Collects report lines; waits, bounded, for a number of them."""

    def __init__(self):
        self.lines, self.times = [], []
        self._changed = threading.Condition()

    def __call__(self, line):
        with self._changed:
            self.lines.append(line)
            self.times.append(time.monotonic())
            self._changed.notify_all()

    def wait_for(self, count: int, timeout: float = 10.0) -> list[str]:
        with self._changed:
            assert self._changed.wait_for(lambda: len(self.lines) >= count, timeout=timeout), self.lines
            return list(self.lines)


def watchdog(cluster, reports, up=(), timeout_secs=300.0, exits=None):
    return ProgressWatchdog(
        cluster,
        timeout_secs=timeout_secs,
        waiting_for="the chief to initialize or restore the model",
        report_fn=reports,
        exit_fn=(exits.append if exits is not None else None),
        first_report_secs=0.2,
        report_every_secs=0.6,
        probe=lambda address: address in up,
    )


def test_an_unreachable_ps_is_named_early_and_again_at_a_steady_interval():
    reports = Reports()
    started = time.monotonic()
    with watchdog(worker(1), reports, up={"localhost:2002"}):
        lines = reports.wait_for(3)
    # Polled each second here: reports come about 1 s apart. The bounds leave a loaded machine
    # a second of late wake-up and still tell these from the defaults (3 s first, 10 s apart).
    assert reports.times[0] - started < 2.5
    gaps = [b - a for a, b in zip(reports.times, reports.times[1:], strict=False)]
    assert all(0.4 < gap < 2.5 for gap in gaps), gaps
    for line in lines:
        assert "/job:worker/task:1: no progress for" in line
        assert "cannot reach /job:ps/task:0 at localhost:2001" in line
        assert "the watchdog ends this task after 300s" in line
    seconds = [int(re.search(r"no progress for (\d+)s", line).group(1)) for line in lines]
    assert seconds == sorted(seconds)


def test_an_unreachable_chief_is_named_by_the_other_replicas():
    reports = Reports()
    with watchdog(worker(1), reports, up={"localhost:2001"}):
        line = reports.wait_for(1)[0]
    assert "cannot reach the chief /job:worker/task:0 at localhost:2002" in line
    assert "/job:ps/task:0" not in line


def test_with_every_peer_up_the_report_says_what_is_awaited():
    reports = Reports()
    started = time.monotonic()
    with watchdog(worker(1), reports, up={"localhost:2001", "localhost:2002"}):
        line = reports.wait_for(1)[0]
    # A normal slow start is not reported at the first probe, only after a report interval.
    assert reports.times[0] - started >= 0.55
    assert line.endswith(
        "waiting for the chief to initialize or restore the model; the watchdog ends this task "
        "after 300s without progress"
    )


def test_no_report_while_training_with_every_peer_up():
    reports = Reports()
    with watchdog(worker(0), reports, up={"localhost:2001"}) as dog:
        dog.beat(5)
        with pytest.raises(AssertionError):
            reports.wait_for(1, timeout=1.0)


def test_reports_also_when_the_watchdog_is_off_and_it_never_exits():
    reports, exits = Reports(), []
    with watchdog(worker(0), reports, timeout_secs=0, exits=exits):
        line = reports.wait_for(2)[0]
    assert "cannot reach /job:ps/task:0 at localhost:2001" in line
    assert "watchdog ends" not in line and exits == []


@pytest.mark.slow
def test_a_worker_without_its_ps_says_so_before_the_watchdog(tmp_path):
    from tests.taskrun import loopback_hosts

    ps_hosts, worker_hosts, reservation = loopback_hosts(1, 2)
    with reservation:  # nobody listens on the ps port
        args = [f"--ps_hosts={ps_hosts}", f"--worker_hosts={worker_hosts}", "--job_name=worker", "--task_index=1"]
        args += [f"--checkpoint_dir={tmp_path}/c", "--watchdog_secs=16"]
        outcome = run_tasks({"worker:1": python_command(RUN_TASK, *args)}, timeout=120)["worker:1"]
    detail = outcome.describe()
    assert outcome.returncode == 200, detail
    reports = [line for line in outcome.stderr.splitlines() if "cannot reach /job:ps/task:0 at " + ps_hosts in line]
    assert len(reports) >= 2, detail
    watchdog_line = next(i for i, line in enumerate(outcome.stderr.splitlines()) if line.startswith("watchdog:"))
    assert outcome.stderr.splitlines().index(reports[0]) < watchdog_line, detail


def test_the_watchdog_still_ends_a_task_without_progress():
    exited = threading.Event()
    messages = []

    def record_exit(message):
        messages.append(message)
        exited.set()

    dog = ProgressWatchdog(
        worker(1), timeout_secs=1.0, waiting_for="x", exit_fn=record_exit, report_fn=Reports(), probe=lambda a: False
    )
    with dog:
        assert exited.wait(timeout=10)
    assert "no progress for 1s" in messages[0] and "unreachable: /job:ps/task:0 (localhost:2001)" in messages[0]
