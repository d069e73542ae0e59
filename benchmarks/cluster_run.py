"""Runs one benchmarked cluster as real processes, bounded, and ends every process whatever happens.

Tasks start at once, or once another task printed a marker (``start_after``).
Tasks marked ``fork`` are forked from a fork server this run starts at launch
(ps_toolkit.process.fork_client), as the launcher starts the toolkit's tasks; its
TensorFlow import is part of the run's launch-to-first-step.
Training is over when any task prints its ``done`` marker (or every task that
must finish has exited); with ``replica_end_s``, once every replica (a task that
printed a marker) has printed ``done`` or exited, waiting at most that long after the
first ``done``, not in a run ended by time (``end_after_warm``): a chief's final
save and evaluation on a loaded machine outlast a short grace. From then on every
process has
``exit_grace_s`` to exit by itself, after which it is killed and recorded as
such: a ps that joins forever, or a sync replica left blocked on its token queue.

One ``ProcessGroup`` (ps_toolkit.process.group) owns the tasks: it reads their
stdout as lines arrive and wakes at each exit, so marker and exit times are
taken as they happen, on the calling thread.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time

import psutil

from benchmarks import CHECKOUT, protocol
from benchmarks.resource_clock import ResourceClock
from ps_toolkit.base.paths import PACKAGE_PARENT
from ps_toolkit.network.netns import PRIVATE_NETWORK_ENV
from ps_toolkit.process.fork_client import ForkServer, ForkUnavailable
from ps_toolkit.process.group import ProcessGroup
from ps_toolkit.process.starter import ExecStarter

# The bound on reading what killed tasks wrote last and on their reaping.
_END_SECS = 10.0


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
    executable: str | None = None  # the python that runs ``argv``; None: this one


@dataclasses.dataclass
class TaskResult:
    task: Task
    lines: list = dataclasses.field(default_factory=list)
    # CPU seconds of every running task at each marker's own time (the time the task stamped on it,
    # not when the harness read the line): (marker, {task: cpu_s}).
    cpu_samples: list = dataclasses.field(default_factory=list)
    # Bytes sent on loopback by the same times (run_cluster's count_loopback).
    loopback_samples: list = dataclasses.field(default_factory=list)
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
    load_average: float | None = None  # the machine's one-minute load average as the run ended

    def describe(self) -> str:
        return "\n".join(r.describe() for r in self.results.values())


def run_cluster(
    tasks: list[Task],
    *,
    timeout_s: float,
    exit_grace_s: float,
    replica_end_s: float = 0.0,
    end_after_warm: tuple | None = None,
    wait_for_event: str | None = None,
    count_loopback: bool = False,
    keep_logs_in: str | None = None,
) -> ClusterOutcome:
    """Starts ``tasks``, waits for training to end and every process to exit (bounded), kills the rest.

    ``end_after_warm=(replicas, seconds)`` also ends training ``seconds`` after
    ``replicas`` tasks printed their ``warm`` marker (for a run measured by time),
    but not before some task printed a ``wait_for_event`` marker, when given.
    ``count_loopback``: at each marker also read the bytes sent on loopback so far
    (``TaskResult.loopback_samples``); meaningful only in a private network namespace.
    ``keep_logs_in``: a folder where each task's stderr is written, as ``<task>.log``, and kept.
    """
    python_path = os.pathsep.join(dict.fromkeys((CHECKOUT, PACKAGE_PARENT)))  # the benchmarks, then ps_toolkit
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", PYTHONPATH=python_path)
    if count_loopback:
        # This process is in a private namespace: the toolkit's tasks stay in it (they would
        # otherwise join a namespace of their own, whose loopback this run cannot count).
        env[PRIVATE_NETWORK_ENV] = "1"
    launched_at = time.time()
    deadline = time.monotonic() + timeout_s
    # A fresh server per run: its import is charged to this run, as a launch pays it.
    server = ForkServer(env) if any(task.fork for task in tasks) else None
    run = _Run(env, server, count_loopback, keep_logs_in)
    try:
        for task in tasks:
            if task.start_after is None:
                run.start(task)
        _start_when_due(run, [t for t in tasks if t.start_after], deadline)
        over_at = _wait_for_end(run, deadline, end_after_warm, wait_for_event)
        if over_at is not None and replica_end_s > 0 and end_after_warm is None:
            over_at = _wait_for_replicas(run, min(deadline, time.monotonic() + replica_end_s))
        _wait_for_exits(run, min(deadline, time.monotonic() + exit_grace_s))
    finally:
        run.end()
    run.stamp_markers()
    outcome = ClusterOutcome(launched_at, run.results, over_at, round(os.getloadavg()[0], 1))
    failed = [r for r in run.results.values() if r.returncode not in (0, None) and not r.killed]
    if over_at is None or failed:
        reason = "timed out" if over_at is None else f"{', '.join(r.task.name for r in failed)} failed"
        raise ClusterRunError(f"cluster run {reason}\n{outcome.describe()}")
    return outcome


class _Run:
    """The started tasks of one run: their processes (one ProcessGroup), stdout lines, stderr logs, results."""

    def __init__(
        self, env: dict, server: ForkServer | None, count_loopback: bool = False, keep_logs_in: str | None = None
    ):
        self.env, self.server, self.count_loopback, self.keep_logs_in = env, server, count_loopback, keep_logs_in
        self.results: dict[str, TaskResult] = {}  # started tasks only
        self.group = ProcessGroup(ExecStarter(), stop_grace_secs=0.0)
        self._logs: dict = {}
        self._partial: dict[str, bytes] = {}
        self.clock = ResourceClock(loopback_bytes if count_loopback else None)

    def start(self, task: Task) -> None:
        """Forks the task from the run's server, or execs it (also when the server refused: one warning line)."""
        self.results[task.name] = TaskResult(task)
        if self.keep_logs_in is None:
            log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in end()
        else:
            log = open(os.path.join(self.keep_logs_in, f"{task.name}.log"), "w+")  # noqa: SIM115 - closed in end()
        self._logs[task.name] = log
        argv, env = [task.executable or sys.executable, *task.argv], {**self.env, **task.env}
        options = {"env": env, "stdout": subprocess.PIPE, "stderr": log, "cwd": CHECKOUT}
        proc = None
        if task.fork and self.server is not None:
            try:
                proc = self.group.start(task.name, argv, spawn=self.server.spawn, **options)
            except ForkUnavailable as err:
                logging.warning("%s: %s; started with exec instead", task.name, err)
        # Exec'd tasks die with this process, even when it is killed: a stopped benchmark leaves no servers behind.
        proc = proc or self.group.start(task.name, argv, **options)
        self._partial[task.name] = b""
        self.clock.track(task.name, proc.pid)
        self.group.add_pipe(proc.stdout, lambda data: self._on_stdout(task.name, data))

    def wait(self, timeout: float) -> None:
        """Waits (at most ``timeout``) for output or an exit; records the exits."""
        for name in self.group.poll(timeout):
            self._record_exit(name)

    def end(self) -> None:
        """Kills what still runs (marked as killed), reads the rest of every stdout, keeps each task's
        stderr tail, stops every tree left and ends the fork server."""
        try:
            for name in self.group.names:
                if self.group.alive(name):
                    self.results[name].killed = True
                    self.group.kill(name, signal.SIGKILL)
            self.group.wait(self.group.names, time.monotonic() + _END_SECS)
            self.group.drain(time.monotonic() + _END_SECS)
            for name in self.group.names:
                self._record_exit(name)
            for name, log in self._logs.items():
                log.seek(0)
                self.results[name].stderr_tail = log.read()[-3000:]
        finally:
            self.clock.stop()
            self.group.close()
            for log in self._logs.values():
                log.close()
            if self.server is not None:
                self.server.close()

    def _record_exit(self, name: str) -> None:
        result = self.results[name]
        if result.exited_at is None and self.group.exited_at(name) is not None:
            result.returncode, result.exited_at = self.group.returncode(name), self.group.exited_at(name)

    def _on_stdout(self, name: str, data: bytes) -> None:
        """Keeps a task's whole stdout lines; at each marker line, every task's CPU seconds."""
        lines = (self._partial[name] + data).split(b"\n")
        self._partial[name] = lines.pop() if data else b""
        if not data and lines[-1] == b"":  # the end: what followed the last newline is a line too
            lines.pop()
        result = self.results[name]
        for raw in lines:
            line = raw.decode("utf-8", "replace").rstrip("\r")
            result.lines.append(line)
            if line.startswith(protocol.MARKER):
                # The CPU and bytes at the line's read time: replaced by those at its own time in stamp_markers.
                result.cpu_samples.append((protocol.parse_markers([line])[0], _cpu_seconds(self.group)))
                if self.count_loopback:
                    result.loopback_samples.append(loopback_bytes())

    def stamp_markers(self) -> None:
        """Replaces each marker's read-time CPU and bytes by the clock's, interpolated at the marker's own time."""
        for result in self.results.values():
            stamped, moved = [], []
            for index, (marker, read_cpu) in enumerate(result.cpu_samples):
                at = marker.get("time")
                stamped.append((marker, read_cpu if at is None else self.clock.cpu_at(at)))
                if self.count_loopback:
                    read_bytes = result.loopback_samples[index] if index < len(result.loopback_samples) else None
                    moved.append(read_bytes if at is None else self.clock.bytes_at(at))
            result.cpu_samples = stamped
            if self.count_loopback:
                result.loopback_samples = moved


def _start_when_due(run: _Run, waiting: list, deadline: float) -> None:
    """Starts each waiting task once its ``start_after`` marker appeared (bounded by ``deadline``)."""
    while waiting:
        due = [t for t in waiting if _seen(run.results, *t.start_after)]
        if not due:
            if time.monotonic() >= deadline or _training_over(run.results):
                return
            run.wait(deadline - time.monotonic())
            continue
        for task in due:
            waiting.remove(task)
            run.start(task)


def _seen(results, name: str, event: str) -> bool:
    return name in results and any(m["event"] == event for m in results[name].markers)


def _training_over(results: dict) -> bool:
    if any(m["event"] == "done" for r in results.values() for m in r.markers):
        return True
    finishing = [r for r in results.values() if r.task.must_finish]
    if any(r.returncode not in (None, 0) for r in results.values()):
        return True  # a failure ends the run early
    return all(r.exited_at is not None for r in finishing)


def _wait_for_end(run: _Run, deadline: float, end_after_warm, wait_for_event=None) -> float | None:
    while not _training_over(run.results):
        waiting = wait_for_event is not None and not any(_seen(run.results, n, wait_for_event) for n in run.results)
        if end_after_warm is not None and not waiting:
            replicas, seconds = end_after_warm
            warm = [m["time"] for r in run.results.values() for m in r.markers if m["event"] == "warm"]
            if len(warm) >= replicas:
                deadline = min(deadline, time.monotonic() + max(warm) + seconds - time.time())
        left = deadline - time.monotonic()
        if left <= 0:
            return time.time() if end_after_warm is not None and _all_warm(run.results, end_after_warm) else None
        run.wait(left)
    return time.time()


def _wait_for_replicas(run: _Run, deadline: float) -> float:
    """Waits (until ``deadline``) for every replica to print ``done`` or exit; the time it ended."""
    while not all(
        r.exited_at is not None or any(m["event"] == "done" for m in r.markers)
        for r in run.results.values()
        if r.markers
    ):
        if any(r.returncode not in (None, 0) for r in run.results.values()):
            break  # a failure ends the run early
        left = deadline - time.monotonic()
        if left <= 0:
            break
        run.wait(left)
    return time.time()


def _all_warm(results, end_after_warm) -> bool:
    return sum(m["event"] == "warm" for r in results.values() for m in r.markers) >= end_after_warm[0]


def _wait_for_exits(run: _Run, deadline: float) -> None:
    while any(r.exited_at is None for r in run.results.values()):
        left = deadline - time.monotonic()
        if left <= 0:
            return
        run.wait(left)


def loopback_bytes() -> int:
    """Bytes sent on this network namespace's loopback so far (each is received once too)."""
    with open("/proc/net/dev", encoding="utf-8") as handle:
        for line in handle:
            name, _, counters = line.partition(":")
            if name.strip() == "lo":
                return int(counters.split()[8])
    raise RuntimeError("no loopback in /proc/net/dev")


def _cpu_seconds(group: ProcessGroup) -> dict:
    """User + system CPU seconds of each live task and its children threads."""
    seconds = {}
    for name in group.names:
        try:
            times = psutil.Process(group.process(name).pid).cpu_times()
            seconds[name] = times.user + times.system
        except psutil.Error:
            pass
    return seconds
