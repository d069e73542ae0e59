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
- the chief (TF_CONFIG's chief or master task) has not accepted connections
  for ``orphan_secs`` and the final checkpoint was never evaluated: the
  evaluator then exits with the retryable status 200, naming the model dir and
  the chief (docs/reliability.md, "Waiting is always bounded").
"""

from __future__ import annotations

import logging
import os
import re
import time

import tensorflow as tf

from ps_toolkit.errors import ConfigError, RetryableError
from ps_toolkit.preflight import reachable

log = logging.getLogger(__name__)

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

    def evaluated(self, checkpoint_path: str) -> None:
        self.last_evaluated = checkpoint_path

    def final_checkpoint_pending(self) -> bool:
        """True when the newest checkpoint is at or past max_steps and not evaluated yet."""
        latest = tf.train.latest_checkpoint(self.model_dir)
        step = checkpoint_step(latest)
        return bool(self.max_steps) and step is not None and step >= self.max_steps and latest != self.last_evaluated

    def check_chief(self) -> None:
        """Raises RetryableError once the chief has been unreachable for ``orphan_secs``."""
        if self.chief_address is None:
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
        while True:
            if self.final_checkpoint_pending():
                log.info("evaluator: the final checkpoint is written; evaluating it now")
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
