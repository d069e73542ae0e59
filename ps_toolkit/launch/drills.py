"""Chaos drills: ``--kill=JOB:INDEX@SECONDS`` parsed, and scheduled against a run's start."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.cluster.config import JOB_NAMES

_KILL = re.compile(r"^(?P<job>[a-z]+):(?P<index>\d+)@(?P<secs>\d+(\.\d*)?|\.\d+)s?$")


def parse_kill(text: str) -> tuple[str, int, float]:
    """Parses a chaos drill such as 'ps:0@5s' into ('ps', 0, 5.0)."""
    match = _KILL.match(text.strip())
    if not match or match["job"] not in JOB_NAMES:
        raise ConfigError(f"--kill={text!r} is not JOB:INDEX@SECONDS, e.g. ps:0@5s (jobs: {', '.join(JOB_NAMES)})")
    return match["job"], int(match["index"]), float(match["secs"])


class DrillSchedule:
    """The drills not yet run, in time order, relative to ``start`` (a time.monotonic() value).

    Example:
        schedule = DrillSchedule([("ps", 0, 5.0)], start=time.monotonic())
        schedule.due(time.monotonic())   # [] now, [("ps", 0, 5.0)] five seconds later
    """

    def __init__(self, kills: Sequence[tuple[str, int, float]], start: float):
        self._pending = sorted(kills, key=lambda kill: kill[2])
        self._start = start

    def next_at(self) -> float:
        """When the next drill is due, or infinity when none is left."""
        return self._start + self._pending[0][2] if self._pending else float("inf")

    def due(self, now: float) -> list[tuple[str, int, float]]:
        """Removes and returns the drills whose time has come."""
        ready = [kill for kill in self._pending if self._start + kill[2] <= now]
        self._pending = self._pending[len(ready) :]
        return ready
