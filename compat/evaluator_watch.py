"""The estimator's evaluator task, bounded: the final checkpoint is evaluated when written, a lost chief ends it.

TF 1.x's evaluator sleeps ``EvalSpec.start_delay_secs`` (default 120 s) before
its first evaluation and ``throttle_secs`` (default 600 s) between two, so the
final checkpoint could wait most of ten minutes for its evaluation; with no
checkpoint ever written it waited forever. Under the compat layer those sleeps
are taken in 1 s slices (``EvaluatorClock``, installed as the time module of
the estimator's training loop) and end early when:

- a checkpoint at or past ``max_steps`` is in the model dir and has not been
  evaluated yet (intermediate checkpoints still wait out the throttle), so the
  evaluator writes the final metrics and ends with the chief;
- the chief has finished training (it writes ``FINISHED_FILE`` in the model dir
  naming its last checkpoint when its ``train()`` returns, which happens before
  ``max_steps`` when the input runs out, as with ``Dataset.repeat(15)``) and that
  checkpoint is evaluated: the evaluation loop then ends and the task exits 0.
  A file written before this evaluator started is a previous run's, and ignored;
- the chief (TF_CONFIG's chief or master task) has not accepted connections
  for ``orphan_secs`` and the final checkpoint was never evaluated: the
  evaluator then exits with the retryable status 200, naming the model dir and
  the chief (docs/reliability.md, "Waiting is always bounded").
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import time

import tensorflow as tf

from ps_toolkit.base.errors import ConfigError, RetryableError
from ps_toolkit.cluster.preflight import reachable

log = logging.getLogger(__name__)

FINISHED_FILE = "ps_toolkit_training_finished.json"
ORPHAN_SECS_ENV = "PS_TOOLKIT_EVALUATOR_ORPHAN_SECS"
DEFAULT_ORPHAN_SECS = 300.0
POLL_SECS = 1.0
_STEP = re.compile(r"-(\d+)$")


def orphan_secs_from_env() -> float:
    text = os.environ.get(ORPHAN_SECS_ENV)
    if text is None:
        return DEFAULT_ORPHAN_SECS
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise ConfigError(f"{ORPHAN_SECS_ENV}={text!r} must be a positive number of seconds")
    return value


def finished_path(model_dir: str) -> str:
    return os.path.join(model_dir, FINISHED_FILE)


def mark_training_started(model_dir: str) -> None:
    """The chief, before training: a previous run's finished file no longer holds."""
    try:
        os.remove(finished_path(model_dir))
    except FileNotFoundError:
        pass


def mark_training_finished(model_dir: str) -> None:
    """The chief, after training: names the last checkpoint, so the evaluator knows it is the final one."""
    record = {"checkpoint": tf.train.latest_checkpoint(model_dir)}
    temporary = finished_path(model_dir) + ".tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(record, handle)
    os.replace(temporary, finished_path(model_dir))


def checkpoint_step(path: str | None) -> int | None:
    """The global step in a checkpoint path (``model.ckpt-400`` -> 400), or None."""
    found = _STEP.search(path or "")
    return int(found.group(1)) if found else None


class CheckpointWatch:
    """What the evaluator waits for: the final checkpoint, or a chief that stays gone."""

    def __init__(self, model_dir: str, max_steps: int | None, chief_address: str | None, orphan_secs: float):
        self.model_dir, self.max_steps = model_dir, max_steps
        self.chief_address, self.orphan_secs = chief_address, orphan_secs
        self.last_evaluated: str | None = None
        self._chief_seen = time.monotonic()
        self._started = time.time()

    def evaluated(self, checkpoint_path: str) -> None:
        self.last_evaluated = checkpoint_path

    def finished_checkpoint(self) -> str | None:
        """The last checkpoint of a chief that finished training after this evaluator started, or None."""
        path = finished_path(self.model_dir)
        try:
            if os.path.getmtime(path) < self._started:
                return None
            with open(path, encoding="utf-8") as handle:
                return json.load(handle).get("checkpoint")
        except (OSError, ValueError, AttributeError):
            return None

    def final_checkpoint_pending(self) -> bool:
        """True when the newest checkpoint is the final one (max_steps reached, or training finished) and is new."""
        latest = tf.train.latest_checkpoint(self.model_dir)
        if latest is None or latest == self.last_evaluated:
            return False
        step = checkpoint_step(latest)
        at_max = bool(self.max_steps) and step is not None and step >= self.max_steps
        return at_max or self.finished_checkpoint() is not None

    def training_over(self) -> bool:
        """True once the chief finished training and its last checkpoint has been evaluated.

        Compared by file name: the chief and the evaluator may mount the model dir at different paths.
        """
        final = self.finished_checkpoint()
        return final is not None and os.path.basename(final) == os.path.basename(self.last_evaluated or "")

    def check_chief(self) -> None:
        """Raises RetryableError once the chief has been unreachable for ``orphan_secs``."""
        if self.chief_address is None or self.training_over():
            return
        now = time.monotonic()
        if reachable(self.chief_address):
            self._chief_seen = now
            return
        if now - self._chief_seen > self.orphan_secs:
            latest = tf.train.latest_checkpoint(self.model_dir)
            seen = f"the newest is {os.path.basename(latest)}" if latest else "none was ever written"
            raise RetryableError(
                f"evaluator: no checkpoint at max_steps={self.max_steps} in {self.model_dir} ({seen}), and the chief "
                f"at {self.chief_address} has not answered for {self.orphan_secs:g}s; exiting"
            )

    def wait(self, secs: float) -> None:
        """Waits up to ``secs`` in 1 s slices; returns early for the final checkpoint, raises for a lost chief."""
        deadline = time.monotonic() + secs
        # Bounded by count as well as by time: a time.sleep that does not sleep (a test's mock) cannot spin it.
        for _ in range(math.ceil(max(secs, 0) / POLL_SECS) + 1):
            if self.final_checkpoint_pending():
                log.info("evaluator: the final checkpoint is written; evaluating it now")
                return
            if self.training_over():
                return
            self.check_chief()
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(POLL_SECS, left))


class EvaluatorClock:
    """Stands in for the ``time`` module of the estimator's training loop; sleeps through the active watch."""

    def __init__(self):
        self.watch: CheckpointWatch | None = None

    @staticmethod
    def time() -> float:
        return time.time()

    def sleep(self, secs: float) -> None:
        if self.watch is None:
            time.sleep(secs)
        else:
            self.watch.wait(secs)
