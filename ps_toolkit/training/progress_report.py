"""What a replica prints for its launcher: a progress line every few seconds or steps, and its result line."""

from __future__ import annotations

import json
import sys
import time

import tensorflow as tf

from ps_toolkit.base.progress_lines import PROGRESS_PREFIX


class ProgressHook(tf.compat.v1.train.SessionRunHook):
    """Records loss and global step each step; prints a progress line every few seconds or global steps.

    The lines (``ps_toolkit progress: {json}``) are what the local launcher
    parses for its status line and charts. Listeners are called with the
    global step after every step (the watchdog listens there).
    """

    def __init__(
        self,
        *,
        loss,
        global_step,
        job: str,
        task: int,
        every_secs: float = 2.0,
        every_global_steps: int | None = None,
        steps_in_run=None,
        step_after_run=None,
    ):
        # A line every ``every_secs``, or sooner once the global step has advanced
        # ``every_global_steps``: a run of a second or two still gets a chart.
        self._every_global_steps = every_global_steps
        # With an in-graph loop a run takes several steps; ``steps_in_run`` says how
        # many, and ``step_after_run`` is the global step read after the loop: a
        # fetch of the variable itself may be read before the loop's first update.
        self._steps_in_run = steps_in_run
        self._step_after_run = step_after_run if step_after_run is not None else global_step
        self._loss = loss
        self._global_step = global_step
        self._job, self._task = job, task
        self._every_secs = every_secs
        self._listeners = []
        self._field_sources = []
        self.local_steps = 0
        self.first_loss = None
        self.last_loss = None
        self.last_global_step = None

    def add_listener(self, listener) -> None:
        self._listeners.append(listener)

    def add_fields(self, source) -> None:
        """``source()`` returns a dict of fields each progress line adds (read when the line is printed)."""
        self._field_sources.append(source)

    def after_create_session(self, session, coord):
        self.last_global_step = int(session.run(self._global_step))
        self._mark = (time.monotonic(), self.last_global_step)

    def before_run(self, run_context):
        fetches = [self._loss, self._step_after_run]
        if self._steps_in_run is not None:
            fetches.append(self._steps_in_run)
        return tf.compat.v1.train.SessionRunArgs(fetches)

    def after_run(self, run_context, run_values):
        loss, step, *steps_in_run = run_values.results
        steps = int(steps_in_run[0]) if steps_in_run else 1
        self.local_steps += steps
        self.last_global_step = int(step)
        # A loop that found training already over ran no step: its loss is the loop's
        # initial value, not a loss; keep the last real one.
        if steps:
            self.last_loss = float(loss)
            if self.first_loss is None:
                self.first_loss = self.last_loss
        for listener in self._listeners:
            listener(self.last_global_step)
        now = time.monotonic()
        advanced = self.last_global_step - self._mark[1]
        if now - self._mark[0] >= self._every_secs or (
            self._every_global_steps and advanced >= self._every_global_steps
        ):
            self.emit(now)

    def end(self, session):
        # before_run fetched the step before each update; read the final one.
        self.last_global_step = int(session.run(self._global_step))

    def emit(self, now=None):
        now = time.monotonic() if now is None else now
        elapsed = max(now - self._mark[0], 1e-9)
        rate = (self.last_global_step - self._mark[1]) / elapsed
        self._mark = (now, self.last_global_step)
        record = {
            "job": self._job,
            "task": self._task,
            "global_step": self.last_global_step,
            "local_step": self.local_steps,
            "loss": self.last_loss,
            "steps_per_sec": round(rate, 2),
            "time": round(time.time(), 3),
        }
        for source in self._field_sources:
            record.update(source())
        print(PROGRESS_PREFIX + json.dumps(record), flush=True)


def print_result(record: dict) -> None:
    """The task's last stdout line: one JSON object."""
    sys.stdout.flush()
    print(json.dumps(record), flush=True)
