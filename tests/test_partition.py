"""The failure-matrix row "network partition of the ps for 20 s": no crash, steps resume soon after, no reset.

Root only. The ps and two workers run scripts/run_task.py in network
namespaces of their own (tests/netns_helpers.py), joined by a bridge. The
partition is a blackhole route: in each worker's namespace to the ps's
address, and in the ps's namespace to each worker's, so no packet crosses in
either direction; deleting the routes heals it. (A blackhole route makes the
sender's own route lookup fail, so TCP keeps its connections and retransmits
into nothing, as across a dead switch; the namespaces themselves stay up.)
"""

from __future__ import annotations

import contextlib
import datetime
import os
import re
import selectors
import shutil
import subprocess
import sys
import time

import pytest

from tests import logwatch
from tests.netns_helpers import Namespaces, ip
from tests.taskrun import REPO, RUN_TASK
from tests.test_failure_matrix import record

pytestmark = [
    pytest.mark.slow,
    pytest.mark.root,
    pytest.mark.timeout(240),
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces and routes need root"),
    pytest.mark.skipif(shutil.which("ip") is None, reason="iproute2 ('ip') is not installed"),
]

TASKS = (("ps", 0), ("worker", 0), ("worker", 1))
PORT = 2222  # every task on its own address, as on separate hosts
PARTITION_SECS = 20
RESUME_BOUND_SECS = 15
CHECKPOINT_EVERY = 100
TRAIN_STEPS = 2000


class Cluster:
    """ps 0, worker 0 (the chief) and worker 1 of run_task.py, each in its own namespace, logging to files."""

    def __init__(self, spaces: Namespaces, tmp_path):
        self.spaces, self.tmp_path = spaces, tmp_path
        addresses = [f"{address}:{PORT}" for address in spaces.addresses]
        self.flags = [
            f"--ps_hosts={addresses[0]}",
            f"--worker_hosts={addresses[1]},{addresses[2]}",
            f"--checkpoint_dir={tmp_path}/ckpt",
            f"--save_checkpoint_steps={CHECKPOINT_EVERY}",
            f"--train_steps={TRAIN_STEPS}",
            "--batch_size=32",
            # Longer than the partition: the watchdog must not end a task that is only waiting.
            "--watchdog_secs=120",
            "--ps_orphan_timeout_secs=120",
        ]
        self.popens: dict[str, subprocess.Popen] = {}

    def log(self, name: str) -> str:
        return str(self.tmp_path / f"{name.replace(':', '-')}.log")

    def start(self) -> Cluster:
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
        for index, (job, task) in enumerate(TASKS):
            name = f"{job}:{task}"
            command = self.spaces.command(
                index, sys.executable, RUN_TASK, f"--job_name={job}", f"--task_index={task}", *self.flags
            )
            with open(self.log(name), "wb") as log:
                self.popens[name] = subprocess.Popen(
                    command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO, start_new_session=True
                )
        return self

    def describe(self) -> str:
        parts = []
        for name, popen in self.popens.items():
            parts.append(f"--- {name}: exit {popen.poll()}\n{logwatch.read_log(self.log(name))[-2500:]}")
        return "\n".join(parts)

    def wait_for_exits(self, timeout: float) -> str | None:
        """Blocks until a task exits (returns its name) or ``timeout`` passes (returns None)."""
        with selectors.DefaultSelector() as selector:
            fds = [os.pidfd_open(popen.pid) for popen in self.popens.values()]
            try:
                for fd, name in zip(fds, self.popens, strict=True):
                    selector.register(fd, selectors.EVENT_READ, name)
                events = selector.select(timeout=timeout)
                return events[0][0].data if events else None
            finally:
                for fd in fds:
                    os.close(fd)

    def wait_all(self, timeout: float) -> dict[str, int | None]:
        deadline = time.monotonic() + timeout
        for popen in self.popens.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(timeout=max(0.1, deadline - time.monotonic()))
        return {name: popen.poll() for name, popen in self.popens.items()}

    def stop(self) -> None:
        for popen in self.popens.values():
            if popen.poll() is None:
                os.killpg(popen.pid, 9)
                popen.wait(timeout=30)


def blackhole(spaces: Namespaces, action: str) -> None:
    """Adds (``add``) or deletes (``del``) the routes that cut the ps (namespace 0) off from the workers."""
    ps_address, workers = spaces.addresses[0], range(1, len(spaces.names))
    for index in workers:
        ip("-n", spaces.names[index], "route", action, "blackhole", f"{ps_address}/32")
        ip("-n", spaces.names[0], "route", action, "blackhole", f"{spaces.addresses[index]}/32")


def connections(spaces: Namespaces) -> dict[str, list[str]]:
    """Each task's established TCP connections as 'local peer [timer:(on,SECS,BACKOFF)]', from ss.

    After a partition TCP resends only when its retransmit timer fires, and
    the timer doubles on each failed try: taken just before healing, these say
    which connections survived and how long each still waits.
    """
    found = {}
    for name, (job, task) in zip(spaces.names, TASKS, strict=True):
        done = subprocess.run(
            ["ip", "netns", "exec", name, "ss", "-tnoH", "state", "established"],
            capture_output=True,
            text=True,
            check=False,
        )
        found[f"{job}:{task}"] = [" ".join(line.split()[2:]) for line in done.stdout.splitlines()]
    return found


@pytest.fixture
def cluster(tmp_path):
    spaces = Namespaces(len(TASKS)).create()
    running = Cluster(spaces, tmp_path)
    try:
        yield running.start()
    finally:
        running.stop()
        spaces.remove()


def progress_after(path: str, since: float) -> list[dict]:
    return [r for r in logwatch.progress(path) if r["time"] > since]


# absl log lines: 'I1121 02:34:12.722901 <thread> file.py:N] message'.
_LOG_TIME = re.compile(
    r"^[IWE](\d{4} \d\d:\d\d:\d\d\.\d+) .*?\] (An error was raised\. This may|Graph was finalized)", re.M
)


def session_recreations(path: str, since: float) -> list[list[float]]:
    """[seconds after ``since`` when MonitoredSession gave up a session, when it began the next one], per recovery."""
    year = datetime.datetime.now().year
    recoveries = []
    for stamp, what in _LOG_TIME.findall(logwatch.read_log(path)):
        at = datetime.datetime.strptime(f"{year}{stamp}", "%Y%m%d %H:%M:%S.%f").timestamp() - since
        if what.startswith("An error"):
            recoveries.append([round(at, 1), None])
        elif recoveries and recoveries[-1][1] is None:
            recoveries[-1][1] = round(at, 1)
    return recoveries


def test_partition_of_the_ps_for_20s(cluster):
    logs = {"chief": cluster.log("worker:0"), "worker": cluster.log("worker:1")}
    logwatch.wait_for_step(logs["worker"], 1, timeout=90)
    before = logwatch.wait_for_step(logs["chief"], 300, timeout=90)
    blackhole(cluster.spaces, "add")
    cut_at = time.time()
    try:
        # The partition lasts PARTITION_SECS unless a task ends meanwhile, which is the failure to catch.
        ended = cluster.wait_for_exits(PARTITION_SECS)
        sockets = connections(cluster.spaces)
    finally:
        blackhole(cluster.spaces, "del")
    healed_at = time.time()
    assert ended is None, f"{ended} exited during the partition\n{cluster.describe()}"
    last_before = max(r["global_step"] for r in logwatch.progress(logs["chief"]) if r["time"] <= cut_at)

    # Waits past the bound, so a slow recovery is measured, not only flagged.
    resumed = {
        name: logwatch.wait_for_step(path, last_before + 1, PARTITION_SECS + RESUME_BOUND_SECS, after_time=healed_at)
        for name, path in logs.items()
    }
    codes = cluster.wait_all(timeout=120)
    report = f"TCP connections just before healing: {sockets}\n{cluster.describe()}"
    assert set(codes.values()) == {0}, f"exit statuses {codes}\n{report}"

    # Nothing reset: every step either replica reports after the cut is past the chief's last one before it.
    lowest = {name: min(r["global_step"] for r in progress_after(path, cut_at)) for name, path in logs.items()}
    assert min(lowest.values()) > before["global_step"], (before, lowest, report)
    resume_secs = {name: round(r["time"] - healed_at, 1) for name, r in resumed.items()}
    # MonitoredSession's recoveries, relative to the healing: [gave up the old session, began a new one].
    recoveries = {name: session_recreations(path, healed_at) for name, path in logs.items()}
    record(
        "network partition of the ps for 20 s",
        resume_secs=resume_secs,
        global_step_before=last_before,
        lowest_step_after=lowest,
        session_recoveries=recoveries,
        connections_at_heal=sockets,
    )
    # A progress line comes at most 2 s after the step it reports, so this is a bound on the real resume time.
    assert max(resume_secs.values()) < RESUME_BOUND_SECS, (resume_secs, recoveries, report)
