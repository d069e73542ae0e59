"""Runs one benchmarked cluster as real processes, bounded, and ends every process whatever happens.

Tasks start at once, or once another task printed a marker (``start_after``).
Tasks marked ``fork`` are forked from a fork server this run starts at launch
(ps_toolkit.process.fork_client), as the launcher starts the toolkit's tasks; its
TensorFlow import is part of the run's launch-to-first-step.
Training is over when any task prints its ``done`` marker (or every task that
must finish has exited); from then on every process has
``exit_grace_s`` to exit by itself, after which it is killed and recorded as
such: a ps that joins forever, or a sync replica left blocked on its token queue.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import psutil

from ps_toolkit.benchmarks import protocol
from ps_toolkit.process import lifecycle
from ps_toolkit.process.fork_client import ForkServer, ForkUnavailable

# The folder holding the ps_toolkit package: a checkout, or site-packages.
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class ClusterRunError(RuntimeError):
    """A task failed or the run timed out; the message carries each task's exit and output tail."""


@dataclasses.dataclass
class Task:
    name: str
    argv: list
    env: dict = dataclasses.field(default_factory=dict)
    must_finish: bool = True  # False: a server that may be killed once training is over
    # (task name, marker event): start only once that task printed that marker.
    start_after: tuple | None = None
    fork: bool = False  # forked from the run's fork server instead of exec'd


@dataclasses.dataclass
class TaskResult:
    task: Task
    lines: list = dataclasses.field(default_factory=list)
    # CPU seconds of every running task, sampled as each marker line arrived: (marker, {task: cpu_s}).
    cpu_samples: list = dataclasses.field(default_factory=list)
    stderr_tail: str = ""
    returncode: int | None = None
    exited_at: float | None = None
    killed: bool = False

    @property
    def markers(self) -> list[dict]:
        return protocol.parse_markers(self.lines)

    def describe(self) -> str:
        return (
            f"--- {self.task.name}: exit {self.returncode}{' (killed)' if self.killed else ''}\n"
            f"$ {' '.join(self.task.argv)}\nstdout tail:\n" + "\n".join(self.lines[-15:]) + "\n"
            f"stderr tail:\n{self.stderr_tail}"
        )


@dataclasses.dataclass
class ClusterOutcome:
    launched_at: float
    results: dict  # name -> TaskResult
    training_over_at: float | None

    def describe(self) -> str:
        return "\n".join(r.describe() for r in self.results.values())


def run_cluster(
    tasks: list[Task], *, timeout_s: float, exit_grace_s: float, end_after_warm: tuple | None = None
) -> ClusterOutcome:
    """Starts ``tasks``, waits for training to end and every process to exit (bounded), kills the rest.

    ``end_after_warm=(replicas, seconds)`` also ends training ``seconds`` after
    ``replicas`` tasks printed their ``warm`` marker (for a run measured by time).
    """
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", PYTHONPATH=REPO)
    changed = threading.Condition()
    results = {}  # started tasks only
    procs, threads, logs = {}, [], {}
    launched_at = time.time()
    deadline = time.monotonic() + timeout_s
    # A fresh server per run: its import is charged to this run, as a launch pays it.
    server = ForkServer(env) if any(task.fork for task in tasks) else None

    def start(task):
        with changed:
            results[task.name] = TaskResult(task)
        log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in the finally below
        logs[task.name] = log
        procs[task.name] = _spawn(server if task.fork else None, task, env, log)
        args = (procs[task.name], results[task.name], changed, procs)
        thread = threading.Thread(target=_follow, args=args, daemon=True)
        thread.start()
        threads.append(thread)

    try:
        for task in tasks:
            if task.start_after is None:
                start(task)
        _start_when_due([t for t in tasks if t.start_after], start, results, changed, deadline)
        over_at = _wait_for_end(results, changed, deadline, end_after_warm)
        _wait_for_exits(results, changed, min(deadline, time.monotonic() + exit_grace_s))
    finally:
        _end_every_task(procs, threads, logs, results, server)
    outcome = ClusterOutcome(launched_at, results, over_at)
    failed = [r for r in results.values() if r.returncode not in (0, None) and not r.killed]
    if over_at is None or failed:
        reason = "timed out" if over_at is None else f"{', '.join(r.task.name for r in failed)} failed"
        raise ClusterRunError(f"cluster run {reason}\n{outcome.describe()}")
    return outcome


def _end_every_task(procs: dict, threads: list, logs: dict, results: dict, server: ForkServer | None) -> None:
    """Kills what still runs (marked as killed), keeps each task's stderr tail, ends the fork server."""
    for name, proc in procs.items():
        if proc.poll() is None:
            results[name].killed = True
        _kill_group(proc)
    for thread in threads:
        thread.join(timeout=10)
    for name, log in logs.items():
        log.seek(0)
        results[name].stderr_tail = log.read()[-3000:]
        log.close()
    if server is not None:
        server.close()


def _spawn(server: ForkServer | None, task: Task, env: dict, log):
    """Forks the task from ``server``, or execs it (also when the server refused: one warning line)."""
    argv, options = [sys.executable, *task.argv], {"env": {**env, **task.env}, "stdout": subprocess.PIPE}
    options.update(stderr=log, cwd=REPO, text=True)
    if server is not None:
        try:
            return server.spawn(argv, **options)
        except ForkUnavailable as err:
            logging.warning("%s: %s; started with exec instead", task.name, err)
    # Dies with this process, even when it is killed: a stopped benchmark leaves no servers behind.
    return lifecycle.spawn(argv, **options)


def _follow(proc, result: TaskResult, changed: threading.Condition, procs: dict) -> None:
    """Reads one task's stdout to its end, then records its exit (its own thread: exact exit times)."""
    for line in proc.stdout:
        line = line.rstrip("\n")
        with changed:
            result.lines.append(line)
            if line.startswith(protocol.MARKER):
                result.cpu_samples.append((protocol.parse_markers([line])[0], _cpu_seconds(procs)))
                changed.notify_all()
    proc.wait()
    with changed:
        result.returncode, result.exited_at = proc.returncode, time.time()
        changed.notify_all()


def _start_when_due(waiting: list, start, results, changed, deadline) -> None:
    """Starts each waiting task once its ``start_after`` marker appeared (bounded by ``deadline``)."""
    while waiting:
        with changed:
            due = [t for t in waiting if _seen(results, *t.start_after)]
            if not due:
                if time.monotonic() >= deadline or _training_over(results):
                    return
                changed.wait(timeout=min(max(deadline - time.monotonic(), 0.01), 1.0))
                continue
        for task in due:
            waiting.remove(task)
            start(task)


def _seen(results, name: str, event: str) -> bool:
    return name in results and any(m["event"] == event for m in results[name].markers)


def _training_over(results: dict) -> bool:
    if any(m["event"] == "done" for r in results.values() for m in r.markers):
        return True
    finishing = [r for r in results.values() if r.task.must_finish]
    if any(r.returncode not in (None, 0) for r in results.values()):
        return True  # a failure ends the run early
    return all(r.exited_at is not None for r in finishing)


def _wait_for_end(results, changed, deadline, end_after_warm) -> float | None:
    with changed:
        while not _training_over(results):
            if end_after_warm is not None:
                replicas, seconds = end_after_warm
                warm = [m["time"] for r in results.values() for m in r.markers if m["event"] == "warm"]
                if len(warm) >= replicas:
                    deadline = min(deadline, time.monotonic() + max(warm) + seconds - time.time())
            left = deadline - time.monotonic()
            if left <= 0:
                return time.time() if end_after_warm is not None and _all_warm(results, end_after_warm) else None
            changed.wait(timeout=min(left, 1.0))
    return time.time()


def _all_warm(results, end_after_warm) -> bool:
    return sum(m["event"] == "warm" for r in results.values() for m in r.markers) >= end_after_warm[0]


def _wait_for_exits(results, changed, deadline) -> None:
    with changed:
        while any(r.exited_at is None for r in results.values()):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            changed.wait(timeout=min(left, 1.0))


def _cpu_seconds(procs: dict) -> dict:
    """User + system CPU seconds of each live task and its children threads."""
    seconds = {}
    for name, proc in list(procs.items()):
        try:
            times = psutil.Process(proc.pid).cpu_times()
            seconds[name] = times.user + times.system
        except psutil.Error:
            pass
    return seconds


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
