"""What every benchmarked task prints for the harness: marker lines with wall-clock step timing.

A task prints ``bench: {json}`` lines: ``first_step`` when its first step has
run, ``warm`` when it first sees the global step past warm-up, a ``tick``
every ``TICK_SECS`` after that, and ``done`` once it has stopped training.
Every marker carries the wall-clock time and the global step it saw. The harness turns these into steps/s,
launch-to-first-step and last-step-to-exit, the same way for every system.
"""

from __future__ import annotations

import json
import time

MARKER = "bench: "
# Steps before this fraction of the run are warm-up and left out of the rate.
WARMUP_FRACTION = 0.2
# After warm-up a task prints a ``tick`` (time, global step) this often, so a run
# the harness ends by time (the raw script's) still has a timing window.
TICK_SECS = 0.5


def emit(event: str, **fields) -> None:
    print(MARKER + json.dumps({"event": event, **fields}), flush=True)


def parse_markers(lines) -> list[dict]:
    return [json.loads(line[len(MARKER) :]) for line in lines if line.startswith(MARKER)]


class StepClock:
    """Records when this task saw the global step pass warm-up and where it last saw it.

    Call ``observe(global_step)`` after each run; ``finish(**extra)`` once training ends.
    """

    def __init__(self, train_steps: int, warm_step: int | None = None):
        self._warm_step = int(train_steps * WARMUP_FRACTION) if warm_step is None else warm_step
        self._next_tick = None
        self.first = None  # (time, global step) after the first run
        self.window_start = None  # first (time, step) at or past warm-up
        self.last = None
        self.local_runs = 0

    def observe(self, global_step: int) -> None:
        now = time.time()
        self.local_runs += 1
        self.last = (now, int(global_step))
        if self.first is None:
            self.first = self.last
            emit("first_step", time=now, global_step=int(global_step))
        if self.window_start is None and global_step >= self._warm_step:
            self.window_start = self.last
            self._next_tick = now + TICK_SECS
            emit("warm", time=now, global_step=int(global_step))
        elif self._next_tick is not None and now >= self._next_tick:
            self._next_tick = now + TICK_SECS
            emit("tick", time=now, global_step=int(global_step))

    def finish(self, **extra) -> None:
        emit(
            "done",
            time=self.last[0] if self.last else None,
            global_step=self.last[1] if self.last else None,
            local_runs=self.local_runs,
            **extra,
        )
