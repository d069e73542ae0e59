"""What the launcher keeps of one attempt: each task's record across restarts, the outcome, the log folder's warning."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

from ps_toolkit.launch.task_output import LogTail, TaskOutput
from ps_toolkit.launch.task_plan import TaskPlan


@dataclasses.dataclass
class Outcome:
    """How one attempt ended. ``failed_task`` names the task that decided a failure."""

    succeeded: bool = False
    message: str = ""
    exit_code: int = 0
    port_conflict: bool = False
    rows: list = dataclasses.field(default_factory=list)
    outputs: dict = dataclasses.field(default_factory=dict)


class LogFolderWarning:
    """Says once per run, on the console, that the log folder cannot be written (full disk, say).

    Task output and the launcher's notes that do not fit are lost; the run goes on.
    """

    def __init__(self, log_dir: str, line: Callable[[str], None]):
        self._log_dir, self._line = log_dir, line
        self.given = False

    def __call__(self, err: OSError) -> None:
        if not self.given:
            self.given = True
            self._line(
                f"launcher: warning: cannot write to the log folder {self._log_dir} ({err.strerror or err}): "
                "task output that does not fit is lost; the run goes on"
            )


def open_log(path: str, warn: LogFolderWarning):
    """The log file a task writes (unbuffered, appended to); /dev/null when it cannot be opened."""
    try:
        return open(path, "ab", buffering=0)  # noqa: SIM115 - TaskOutput closes it
    except OSError as err:
        warn(err)
        return open(os.devnull, "ab", buffering=0)  # noqa: SIM115


class TaskRecord:
    """A task's history across restarts; its process is in the ClusterSupervisor's ProcessGroup, under ``plan.name``."""

    def __init__(self, plan: TaskPlan, output: TaskOutput, log, log_path: str):
        self.plan, self.output, self.log_path = plan, output, log_path
        self.log = log  # the task's stdout and stderr
        self.tail = LogTail(log.name, output)
        self.state = "pending"
        self.restarts = 0
        self.run_secs = 0.0
        self.started_at = 0.0
        self.stop_requested = False
        self.drill_killed = False
        self.failure: str | None = None  # why it failed for good, as the verdict names it
        self.exit_code = 0
