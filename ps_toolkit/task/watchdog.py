"""A progress watchdog: a task that stops making progress ends, says why, and exits retryably.

Design: docs/design.md, "Bounded waits: the watchdog and the step bound".
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time

from ps_toolkit.base.errors import EXIT_RETRYABLE
from ps_toolkit.cluster.config import PS, ClusterConfig
from ps_toolkit.cluster.preflight import reachable

log = logging.getLogger(__name__)
FIRST_REPORT_SECS = 3.0
REPORT_EVERY_SECS = 10.0

# A poll this much later than asked means the process was stopped or suspended, not waiting.
_STOPPED_SECS = 2.0


class ProgressWatchdog:
    """Ends the process unless ``beat()`` reports a new global step often enough.

    Example:
        with ProgressWatchdog(cluster, timeout_secs=120, waiting_for="a ready model") as dog:
            ...  # session creation
            dog.expect("global-step progress")
            dog.beat(step)  # from a hook, after every step
    """

    def __init__(
        self,
        cluster: ClusterConfig,
        *,
        timeout_secs: float,
        waiting_for: str,
        exit_fn=None,
        report_fn=None,
        first_report_secs: float = FIRST_REPORT_SECS,
        report_every_secs: float = REPORT_EVERY_SECS,
        probe=reachable,
        sync_replicas: bool = False,
    ):
        self._cluster = cluster
        self._timeout = timeout_secs
        self._waiting_for = waiting_for
        self._exit = exit_fn or _exit_retryable
        self._report = report_fn or _report_waiting
        self._first_report = first_report_secs
        self._report_every = report_every_secs
        self._probe = probe
        self._sync = sync_replicas
        self._down_since: dict[str, float] = {}  # address -> wall time first seen down
        self._restarts: dict[str, tuple[float, float]] = {}  # address -> (down, up again), since the last step
        self._next_report = None  # idle time at which the next waiting report is due
        self._last_step = None
        self._last_change = time.monotonic()
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="progress-watchdog", daemon=True)

    def expect(self, waiting_for: str) -> None:
        """Names what the task waits for next; restarts the clock."""
        with self._lock:
            self._waiting_for = waiting_for
            self._last_change = time.monotonic()

    def beat(self, global_step: int) -> None:
        with self._lock:
            if global_step != self._last_step:
                self._last_step = global_step
                self._last_change = time.monotonic()
                self._next_report = None
                self._restarts.clear()

    def working(self) -> None:
        """Progress that is not a new global step (an evaluation's batch): restarts the clock."""
        with self._lock:
            self._last_change = time.monotonic()
            self._next_report = None

    def __enter__(self) -> ProgressWatchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stopped.set()

    def _watch(self) -> None:
        watching = bool(self._timeout and self._timeout > 0)
        interval = min(1.0, self._timeout / 4) if watching else 1.0
        last_poll = time.monotonic()
        while not self._stopped.wait(timeout=interval):
            now = time.monotonic()
            # CLOCK_MONOTONIC runs on while the process is stopped (SIGSTOP), and no
            # clock excludes exactly that time. But this wait then overshoots by the
            # stopped time: a wake that late means the process did not run, and that
            # time is not counted against the peers (nor is a suspended machine's).
            overshoot = now - last_poll - interval
            last_poll = now
            with self._lock:
                if overshoot > _STOPPED_SECS:
                    self._last_change += overshoot
                idle = now - self._last_change
                waiting_for, step = self._waiting_for, self._last_step
                due = self._next_report if self._next_report is not None else self._first_report
            if idle >= interval:
                self._track_restarts()
            if watching and idle > self._timeout:
                self._exit(self._message(idle, waiting_for, step))
                return
            if idle >= due:
                report = self.waiting_report(idle, step)
                with self._lock:
                    # Probed again a second later when there was nothing to say yet.
                    self._next_report = idle + (self._report_every if report else interval)
                if report:
                    self._report(report)

    def peers(self) -> list[tuple[str, str]]:
        """(device, address) of the tasks this one cannot train without: every ps, and the chief."""
        needed = [(f"/job:{PS}/task:{i}", a) for i, a in enumerate(self._cluster.jobs.get(PS, ()))]
        if not self._cluster.is_chief:
            job, index = self._cluster.chief_task
            needed.append((f"the chief /job:{job}/task:{index}", self._cluster.jobs[job][index]))
        return needed

    def _watched(self) -> list[tuple[str, str]]:
        """The peers, and for a sync replica every other replica: each gives gradients to every step."""
        watched = self.peers()
        if self._sync:
            known = {address for _, address in watched}
            for job, index in self._cluster.replica_tasks():
                address = self._cluster.jobs[job][index]
                if address not in known and (job, index) != (self._cluster.task_type, self._cluster.task_index):
                    watched.append((f"the replica /job:{job}/task:{index}", address))
        return watched

    def _track_restarts(self) -> None:
        """Probes the watched peers; one seen down and then up again is recorded as restarted."""
        now = time.time()
        for _, address in self._watched():
            up = self._probe(address)
            with self._lock:
                if not up:
                    self._down_since.setdefault(address, now)
                elif address in self._down_since:
                    self._restarts[address] = (self._down_since.pop(address), now)

    def _peer_state(self) -> str:
        """What the peers say about the wait: which do not answer, which restarted since the last step."""
        down = [f"{device} ({address})" for device, address in self._watched() if not self._probe(address)]
        with self._lock:
            restarts = dict(self._restarts)
        names = dict((address, device) for device, address in self._watched())
        restarted = [
            f"{names.get(address, address)} ({address}) restarted: unreachable from {_clock(went)}, "
            f"answering again since {_clock(back)}"
            for address, (went, back) in sorted(restarts.items())
        ]
        parts = [f"unreachable: {', '.join(down)}"] if down else []
        parts += restarted
        if parts:
            return "; " + "; ".join(parts)
        if self._sync:
            return (
                "; every ps and every replica answers and none was seen down while waiting: "
                "a replica is stalled, or a peer restarted within a poll"
            )
        return "; every ps answers"

    def waiting_report(self, idle: float, step) -> str | None:
        """One line naming the unreachable peers and their addresses, or, before the first step and
        after a report interval, what the task waits for; None when there is nothing to say."""
        down = [f"{device} at {address}" for device, address in self.peers() if not self._probe(address)]
        limit = (
            f"; the watchdog ends this task after {self._timeout:.0f}s without progress"
            if self._timeout and self._timeout > 0
            else ""
        )
        at = f" at global step {step}" if step is not None else ""
        if down:
            return (
                f"{self._cluster.device}: no progress for {idle:.0f}s{at}: cannot reach {', '.join(down)} "
                f"(TensorFlow keeps retrying){limit}"
            )
        with self._lock:
            restarted = bool(self._restarts)
        # With every peer up, a slow start is normal for a while: said only after a report interval.
        if (step is None or restarted) and idle >= self._report_every:
            peers = self._peer_state() if restarted else ""
            waiting = f"waiting for {self._waiting_for}{peers}"
            return f"{self._cluster.device}: no progress for {idle:.0f}s{at}, {waiting}{limit}"
        return None

    def _message(self, idle: float, waiting_for: str, step) -> str:
        at = f" at global step {step}" if step is not None else ""
        return (
            f"{self._cluster.device}: no progress for {idle:.0f}s{at} while waiting for {waiting_for}"
            f"{self._peer_state()}. Exiting with status {EXIT_RETRYABLE} (retryable)."
        )


def _clock(wall: float) -> str:
    return time.strftime("%H:%M:%S UTC", time.gmtime(wall))


def _report_waiting(message: str) -> None:
    log.warning("%s", message)


def _exit_retryable(message: str) -> None:
    """Exits from the watchdog thread: the main thread is stuck inside TensorFlow."""
    log.error("%s", message)
    sys.stderr.write(f"watchdog: {message}\n")
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(EXIT_RETRYABLE)
