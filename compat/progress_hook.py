"""Progress records from a MonitoredTrainingSession (the estimator's too), for the launcher that started the task.

An old script's or estimator's training logs its global step at INFO, which
TensorFlow does not print by default, so a launcher saw nothing of it: no
step on the status line, and no evidence for its verdict that training
happened. Under a launcher (``PS_TOOLKIT_CLUSTER_ARGS`` is set for every task
it starts) the compat layer's MonitoredTrainingSession gets ``ProgressHook``,
which prints the toolkit's progress record (``ps_toolkit progress: {...}``,
hidden from the console, read into the status line and the chart) at most
every ``INTERVAL_SECS`` and once at the end. Run by hand, nothing is printed.
"""

from __future__ import annotations

import json
import os
import sys
import time

import tensorflow as tf

from ps_toolkit.base.progress_lines import CLUSTER_ARGS_ENV, PROGRESS_PREFIX

INTERVAL_SECS = 2.0
_v1 = tf.compat.v1


def wanted(environ=os.environ) -> bool:
    """Whether a launcher started this task (and so reads its progress records)."""
    return CLUSTER_ARGS_ENV in environ


class ProgressHook(_v1.train.SessionRunHook):
    """Prints ``{"global_step", "local_step", "steps_per_sec", "time"}`` every INTERVAL_SECS and at the end."""

    def __init__(self, stream=None):
        self._stream = stream
        self._global_step = None
        self._local_steps = 0
        self._last = (0.0, None)  # (time printed, global step then)
        self._asked = False

    def begin(self):
        self._global_step = _v1.train.get_global_step()

    def before_run(self, run_context):
        self._asked = self._global_step is not None and time.time() - self._last[0] >= INTERVAL_SECS
        return _v1.train.SessionRunArgs(self._global_step) if self._asked else None

    def after_run(self, run_context, run_values):
        self._local_steps += 1
        if self._asked:
            self._print(int(run_values.results))

    def end(self, session):
        if self._global_step is None:
            return
        try:
            self._print(int(session.run(self._global_step)))
        except (tf.errors.OpError, RuntimeError):  # the session is going away: the last record stands
            pass

    def _print(self, global_step: int) -> None:
        now = time.time()
        then, step_then = self._last
        # A global step that went back (the session was re-created and restored an older checkpoint after a
        # ps lost its variables) starts the rate afresh: steps/s is never negative.
        moved = step_then is not None and global_step >= step_then and now > then
        rate = (global_step - step_then) / (now - then) if moved else 0.0
        self._last = (now, global_step)
        record = {"global_step": global_step, "local_step": self._local_steps, "steps_per_sec": rate, "time": now}
        stream = self._stream or sys.stdout
        stream.write(PROGRESS_PREFIX + json.dumps(record) + "\n")
        stream.flush()


def print_marker(name: str, stream=None) -> None:
    """Prints ``{name: true, "time": ...}``: an evaluator's ``evaluator_started`` and each
    ``evaluation_started``, which with the evaluation's record times it (ps_toolkit/launch/wind_down.py)."""
    stream = stream or sys.stdout
    stream.write(PROGRESS_PREFIX + json.dumps({name: True, "time": time.time()}) + "\n")
    stream.flush()


def print_evaluation(metrics: dict, stream=None) -> None:
    """Prints an evaluation's metrics as a progress record marked ``"evaluation": true``.

    The launcher reads the record's accuracy and loss into its verdict and its chart.

    Args:
        metrics: the estimator's evaluation result (``global_step`` and the metric values).
        stream: where to print; sys.stdout by default.
    """
    record = {"evaluation": True, "time": time.time()}
    for name, value in metrics.items():
        try:
            record[str(name)] = int(value) if name == "global_step" else float(value)
        except (TypeError, ValueError):  # a metric that is not one number (a histogram, a string)
            continue
    stream = stream or sys.stdout
    stream.write(PROGRESS_PREFIX + json.dumps(record) + "\n")
    stream.flush()
