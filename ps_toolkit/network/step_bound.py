"""How far the global step can honestly move between two of the chief's reads.

Pure arithmetic, no TensorFlow. Design: docs/design.md, "Bounded waits: the watchdog and the step bound".
"""

from __future__ import annotations

import dataclasses

DEFAULT_SLACK = 10


@dataclasses.dataclass
class StepBound:
    """The bound for one cluster; ``check`` each read in order, with the chief's own steps and seconds.

    Example:
        bound = StepBound(num_replicas=3, steps_per_run=20, train_steps=1000)
        bound.reset(0, now=0.0)
        bound.check(60, now=1.0, own_steps=20, own_secs=0.9)   # None: plausible
        bound.check(10**9, now=2.0, own_steps=20, own_secs=0.9)  # a one-line reason
    """

    num_replicas: int
    steps_per_run: int
    train_steps: int
    slack: int = DEFAULT_SLACK
    warm_runs: int = 10
    _timed_runs: int = 0
    _last: int | None = None
    _last_time: float = 0.0
    _peak_rate: float = 0.0  # the chief's fastest own steps per second so far

    @property
    def ceiling(self) -> int:
        return self.train_steps + self.num_replicas * self.steps_per_run * self.slack

    def reset(self, step: int, now: float) -> str | None:
        """A fresh session's first read: only the ceiling applies; it becomes the baseline."""
        self._last, self._last_time = step, now
        return self._above_ceiling(step, "read at session start")

    def check(self, step: int, now: float, own_steps: int = 0, own_secs: float = 0.0) -> str | None:
        """None when ``step`` is plausible after the last read, else why not (one line)."""
        if own_steps > 0 and own_secs > 0:
            self._peak_rate = max(self._peak_rate, own_steps / own_secs)
            self._timed_runs += 1
        problem = self._above_ceiling(step, f"after {self._last}")
        if problem is None and self._last is not None and step > self._last:
            elapsed = max(now - self._last_time, 0.0)
            allowed = self.allowed_jump(elapsed)
            if allowed is not None and step - self._last > allowed:
                problem = (
                    f"the global step jumped from {self._last} to {step} in {elapsed:.1f}s: more than "
                    f"{self.num_replicas} replica(s) could have stepped (at most {allowed})"
                )
        if problem is None:
            self._last, self._last_time = step, now
        return problem

    def allowed_jump(self, elapsed: float) -> int | None:
        """The largest honest jump in ``elapsed`` seconds, or None while the chief's own runs are warming up."""
        if self._timed_runs < self.warm_runs:
            return None
        runs = self.num_replicas * self.steps_per_run * self.slack
        return int(runs + self.slack * self.num_replicas * self._peak_rate * elapsed)

    def _above_ceiling(self, step: int, when: str) -> str | None:
        if step > self.ceiling:
            return (
                f"the global step is {step} ({when}), above anything {self.num_replicas} replica(s) "
                f"training to --train_steps={self.train_steps} can reach (at most {self.ceiling})"
            )
        return None
