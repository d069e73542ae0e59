"""How a local run is judged and what happens to failed tasks: the launcher's policy flags, checked when made."""

from __future__ import annotations

import dataclasses

from ps_toolkit.base import flag_ranges
from ps_toolkit.base.errors import ConfigError
from ps_toolkit.launch import work_evidence

SUCCESS_POLICIES = ("chief", "all_workers")
RESTART_POLICIES = ("never", "on-failure")


@dataclasses.dataclass(frozen=True)
class Policy:
    """How a run is judged and what happens to failed tasks; checked when made (ConfigError)."""

    success_policy: str = "chief"  # chief: the chief's status 0 ends the run; all_workers: every worker's
    grace_secs: float = 10.0  # after success, time the other workers get to end by themselves
    ps_grace_secs: float = 5.0  # then the time parameter servers get
    stop_grace_secs: float = 5.0  # between SIGTERM and SIGKILL when a task is stopped
    restart: str = "never"  # or on-failure: restart failed tasks in place
    max_restarts: int = 3  # per task
    kills: tuple = ()  # chaos drills: ((job, index, seconds after launch), ...)
    timeout_secs: float | None = None  # stop everything and fail after this long
    # A regular expression: a line of any task's output it matches is evidence that the job did its work.
    success_pattern: str | None = None
    retry_port_conflicts: bool = True  # the launcher sets it: only reserved ports can be redrawn

    def __post_init__(self):
        object.__setattr__(self, "kills", tuple(self.kills))
        if self.success_policy not in SUCCESS_POLICIES:
            raise ConfigError(f"--success_policy={self.success_policy!r}; valid: {', '.join(SUCCESS_POLICIES)}")
        if self.restart not in RESTART_POLICIES:
            raise ConfigError(f"--restart={self.restart!r}; valid: {', '.join(RESTART_POLICIES)}")
        for name in ("grace_secs", "ps_grace_secs", "stop_grace_secs"):
            flag_ranges.check_seconds(name, getattr(self, name), zero_ok=True, none_ok=False)
        flag_ranges.check_int("max_restarts", self.max_restarts, low=0, high=10_000)
        flag_ranges.check_seconds("timeout_secs", self.timeout_secs)
        work_evidence.compile_pattern(self.success_pattern)
        for job, index, secs in self.kills:
            flag_ranges.check_seconds(f"kill={job}:{index}@", secs, zero_ok=True, none_ok=False)
