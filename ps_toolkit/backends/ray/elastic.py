"""Async workers that join and leave a running Ray job: the slots above --min_workers, up to --max_workers.

Every task's cluster names all ``max_workers`` workers: a ps fetches a worker's
gradients from the address its own ClusterSpec gives for that worker (a ps told
nothing of a worker fails its steps with "No worker known as /job:worker/..."),
so each elastic slot's port is reserved on a node at the start, by a port holder
that asks Ray for no CPU. A slot's task takes its Ray resources only while it
runs, on the node that holds its port. The ps wait for the done tokens of the
permanent workers only (``server.ELASTIC_WORKERS_FROM_ENV``); the chief and the
workers never wait for one another in async training (device filters).

What changes the count is explicit: the number in the run folder's ``workers``
file (``echo 4 > RUN/workers``, or ``request_workers(RUN, 4)``), read every
second and clipped to [min, max]. A worker that leaves is stopped on purpose
(SIGTERM, then SIGKILL after the grace): it is no failure, it is out of the
verdict, and it is named in the summary with the phase it ended.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.base.progress_lines import PROGRESS_PREFIX
from ps_toolkit.launch.task_plan import TaskPlan

WANTED_FILE = "workers"
_POLL_SECS = 1.0


def request_workers(run_dir: str, count: int) -> None:
    """Asks the elastic job running in ``run_dir`` for ``count`` workers (written atomically)."""
    path = os.path.join(run_dir, WANTED_FILE)
    with open(path + ".tmp", "w", encoding="ascii") as handle:
        handle.write(f"{int(count)}\n")
    os.replace(path + ".tmp", path)


@dataclasses.dataclass(frozen=True)
class Phase:
    """A stretch of the run with one worker count, and the chief's (time, global step) records within it."""

    workers: int
    started: float  # wall-clock seconds
    ended: float | None = None
    records: tuple[tuple[float, int], ...] = ()

    def line(self, t0: float) -> str:
        end = "the end" if self.ended is None else f"{self.ended - t0:.1f}s"
        span = f"{self.workers} workers from {self.started - t0:.1f}s to {end}"
        if len(self.records) < 2:
            return f"{span}: fewer than two progress records of the chief"
        (first_time, first_step), (last_time, last_step) = self.records[0], self.records[-1]
        rate = (last_step - first_step) / max(last_time - first_time, 1e-9)
        return f"{span}: global step {first_step} -> {last_step}, {rate:.1f} global steps/s"


class ElasticWorkers:
    """Starts and stops the elastic slots' ``ray_task`` processes after the count in the run folder."""

    def __init__(
        self,
        plans: list[TaskPlan],
        *,
        min_workers: int,
        log_dir: str,
        chief_log: str,
        stop_grace_secs: float,
        on_start: Callable[[int], None] = lambda pid: None,
    ):
        self._plans = plans  # slot i is worker min_workers + i
        self._min = min_workers
        self._log_dir = log_dir
        self._chief_log = chief_log
        self._grace = stop_grace_secs
        self._on_start = on_start  # the run's reaper: a SIGKILLed launcher takes them with it
        self._running: dict[str, subprocess.Popen] = {}
        self._ended: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="elastic-workers", daemon=True)
        self.phases: list[Phase] = []
        self.changes: list[str] = []

    @property
    def max_workers(self) -> int:
        return self._min + len(self._plans)

    def __enter__(self) -> ElasticWorkers:
        request_workers(self._log_dir, self._min)
        self.phases.append(Phase(self._min, time.time()))
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join(timeout=_POLL_SECS * 10)
        self._resize(self._min, why="the run ended")
        self._close_phase(time.time())

    def _follow(self) -> None:
        while not self._stop.wait(_POLL_SECS):
            self._reap()
            wanted = self._wanted()
            if wanted is not None and wanted != self._min + len(self._running):
                self._resize(wanted, why=f"{WANTED_FILE} asked for {wanted}")

    def _wanted(self) -> int | None:
        try:
            with open(os.path.join(self._log_dir, WANTED_FILE), encoding="ascii") as handle:
                text = handle.read().strip()
        except OSError:
            return None
        if not text.isdigit():
            return None
        return min(max(int(text), self._min), self.max_workers)

    def _reap(self) -> None:
        """Slots whose task ended of itself (it saw the last step, or it failed) leave the running set."""
        for name, process in list(self._running.items()):
            status = process.poll()
            if status is not None:
                del self._running[name]
                self._ended.append(f"{name} ended by itself (exit status {status})")

    def _resize(self, wanted: int, *, why: str) -> None:
        before = self._min + len(self._running)
        free = [plan for plan in self._plans if plan.name not in self._running]
        for plan in free[: max(wanted - before, 0)]:
            self._start(plan)
        leaving = list(reversed(self._running))[: max(before - wanted, 0)]  # the last to join leave first
        for name in leaving:
            self._retire(name, why)
        after = self._min + len(self._running)
        if after != before:
            now = time.time()
            self._close_phase(now)
            self.phases.append(Phase(after, now))
            self.changes.append(f"workers {before} -> {after} ({why})")

    def _start(self, plan: TaskPlan) -> None:
        log = open(os.path.join(self._log_dir, f"{plan.job}-{plan.index}.log"), "ab")  # noqa: SIM115 (the child's)
        with log:
            log.write(f"--- start (elastic): {' '.join(plan.argv)} ---\n".encode())
            log.flush()
            self._running[plan.name] = subprocess.Popen(
                list(plan.argv), env=plan.env, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True
            )
        self._on_start(self._running[plan.name].pid)

    def _retire(self, name: str, why: str) -> None:
        """Stops a slot on purpose: SIGTERM (passed to the task), SIGKILL after the grace (the actor dies)."""
        process = self._running.pop(name)
        plan = next(plan for plan in self._plans if plan.name == name)
        with open(os.path.join(self._log_dir, f"{plan.job}-{plan.index}.log"), "ab") as log:
            log.write(f"--- retired (elastic): {why} ---\n".encode())
        process.send_signal(signal.SIGTERM)
        try:
            status = process.wait(timeout=self._grace)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            status = process.wait(timeout=30)
        self._ended.append(f"{name} retired (exit status {status})")

    def _close_phase(self, now: float) -> None:
        phase = self.phases[-1]
        if phase.ended is not None:
            return
        records = tuple(_chief_records(self._chief_log, phase.started, now))
        self.phases[-1] = dataclasses.replace(phase, ended=now, records=records)

    def summary_lines(self) -> list[str]:
        """The changes, each phase's global steps/s (from the chief's progress records), and who left."""
        t0 = self.phases[0].started
        lines = [f"elastic: {change}" for change in self.changes]
        lines += [f"elastic phase {i + 1}: {phase.line(t0)}" for i, phase in enumerate(self.phases)]
        return lines + [f"elastic: {ended}" for ended in self._ended]


def _chief_records(path: str, since: float, until: float) -> list[tuple[float, int]]:
    """(time, global step) of the chief's progress records stamped within [since, until]."""
    steps = []
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if not line.startswith(PROGRESS_PREFIX):
                    continue
                try:
                    record = json.loads(line[len(PROGRESS_PREFIX) :])
                except ValueError:
                    continue
                stamp, step = record.get("time"), record.get("global_step")
                if isinstance(stamp, (int, float)) and isinstance(step, int) and since <= stamp <= until:
                    steps.append((stamp, step))
    except OSError:
        return []
    return steps


def check_bounds(min_workers: int | None, max_workers: int | None) -> tuple[int, int] | None:
    """(min, max) of an elastic launch, or None when the flags ask for none.

    Raises:
        ConfigError: a bound alone, min below 1, or max not above min.
    """
    if min_workers is None and max_workers is None:
        return None
    if min_workers is None or max_workers is None:
        raise ConfigError("--min_workers and --max_workers go together: give both (or neither)")
    if min_workers < 1 or max_workers <= min_workers:
        raise ConfigError(f"--min_workers={min_workers} --max_workers={max_workers}: need 1 <= min < max")
    return min_workers, max_workers
