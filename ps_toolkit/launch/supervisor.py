"""Runs one local cluster to its end: starts tasks, watches them, applies the policies.

One event loop watches every task process through a ``ProcessGroup``
(ps_toolkit.process.group), which owns them. It waits on the tasks' exits
and a signal wake-up fd with a bounded timeout, never on a sleep, and reads
what the tasks appended to their log files each time it wakes (at least every
``TAIL_SECS``). A task writes its output into its log file itself, so it never
waits on the launcher. Policies: success (the chief, or all workers, finished with 0, then
``verdict.confirm``: no task failed for good and training happened), restart in place on
failure, scheduled SIGKILL drills, and teardown of everything still running once the run is decided.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from collections.abc import Callable, Sequence

from ps_toolkit.base.errors import EXIT_CONFIG, EXIT_ENVIRONMENT, EXIT_PORT_IN_USE
from ps_toolkit.cluster.config import CHIEF, PS, WORKER
from ps_toolkit.launch import role_hint, verdict, wind_down, work_evidence
from ps_toolkit.launch.attempt_records import LogFolderWarning, Outcome, TaskRecord, open_log
from ps_toolkit.launch.drills import DrillSchedule
from ps_toolkit.launch.policy import Policy
from ps_toolkit.launch.status import (
    Console,
    StepRate,
    SummaryRow,
    describe_exit,
    exit_status_cell,
    status_text,
    write_pids,
)
from ps_toolkit.launch.task_output import TaskOutput
from ps_toolkit.launch.task_plan import TaskPlan
from ps_toolkit.process import lifecycle, stack_dump
from ps_toolkit.process.group import ProcessGroup
from ps_toolkit.process.starter import TaskStarter, make_starter

# How often the event loop reads the tasks' new log lines (the console's echo lags by at most this).
TAIL_SECS = 0.2
# How often the log folder's free space is checked.
_SPACE_CHECK_SECS = 1.0


class ClusterSupervisor:
    """Watches the tasks of one cluster attempt until the run is decided and torn down."""

    def __init__(
        self,
        plans: Sequence[TaskPlan],
        *,
        log_dir: str,
        policy: Policy,
        console: Console,
        quiet: bool,
        starter: TaskStarter | None = None,
        log_warning: LogFolderWarning | None = None,
        on_start: Callable[[int], None] | None = None,
    ):
        self._policy = policy
        self._console = console
        # Starts (and restarts) each task through any starter.TaskStarter (fork server or exec). Each pid
        # (its session) goes to ``on_start`` once it runs: a reaper that outlives this process kills the sessions.
        # Stops ask for the policy's grace themselves; what close() sweeps up at the end gets none.
        self._group = ProcessGroup(starter or make_starter(note=console.line), stop_grace_secs=0.0, on_start=on_start)
        self._tasks: dict[str, TaskRecord] = {}
        self._log_dir = log_dir
        self._log_warning = log_warning or LogFolderWarning(log_dir, console.line)
        echo = None if quiet else console.line
        pattern = work_evidence.compile_pattern(policy.success_pattern)
        for plan in plans:
            path = os.path.join(log_dir, f"{plan.job}-{plan.index}.log")
            log = open_log(path, self._log_warning)
            output = TaskOutput(
                plan.name, log, echo, tailed=True, on_log_error=self._log_warning, success_pattern=pattern
            )
            self._tasks[plan.name] = TaskRecord(plan, output, log, path)
        self._space_checked_at = float("-inf")
        self._outcome: Outcome | None = None
        self._restarts_allowed = True
        self._rate = StepRate()
        self._usage_cache: dict = {}
        self._signal_fd: int | None = None
        self._interrupted = False  # a signal was handled in the current wait
        self._last_usage_at = float("-inf")
        self._t0 = time.monotonic()
        self._drills = DrillSchedule((), self._t0)
        self._stop_notes: list[wind_down.StopNote] = []

    # The run.
    def run(self, *, signal_fd: int | None = None) -> Outcome:
        """Runs the cluster to its end. ``signal_fd`` wakes the loop when a signal arrives."""
        self._signal_fd = signal_fd
        if signal_fd is not None:
            self._group.add_reader(signal_fd, self._on_signal)
        self._t0 = time.monotonic()
        self._drills = DrillSchedule(self._policy.kills, self._t0)
        try:
            for task in self._tasks.values():
                if self._outcome is None:
                    self._start(task)
            deadline = None if self._policy.timeout_secs is None else self._t0 + self._policy.timeout_secs
            self._watch(lambda: self._outcome is not None, deadline)
            if self._outcome is None:
                message = f"the run did not end within --timeout_secs={self._policy.timeout_secs:g}"
                self._decide(False, message + self._dump_stacks_of_running(), 1)
            self._restarts_allowed = False
            if self._outcome.succeeded:
                self._wind_down()
                self._confirm_success()
        finally:
            self._stop([t for t in self._tasks.values() if self._alive(t)])
            # Descendants of tasks that already exited may linger in their sessions: no grace for them.
            self._group.close()
            for task in self._tasks.values():
                task.tail.finish()
                task.output.close()
            self._console.clear_status()
        self._outcome.rows = [self._row(t) for t in self._tasks.values()]
        self._outcome.outputs = {name: t.output for name, t in self._tasks.items()}
        return self._outcome

    def _dump_stacks_of_running(self) -> str:
        """Has every running toolkit task write its Python stacks to its log; says where, or ''."""
        dumped = [
            task.log_path
            for task in self._tasks.values()
            if self._alive(task)
            and stack_dump.stacks_of_task(task.plan.argv, self._group.process(task.plan.name).pid, task.log_path)
        ]
        return (
            f"; where each task still running waits (its Python stacks) is at the end of {', '.join(dumped)}"
            if dumped
            else ""
        )

    def _wind_down(self) -> None:
        """After success: the others get their bounds to end on their own, then are stopped, saying why."""
        policy = self._policy
        tasks = list(self._tasks.values())
        self._stop_notes = wind_down.end_after_success(
            tasks, policy.grace_secs, policy.ps_grace_secs, self._watch, self._stop, self._alive
        )

    def _confirm_success(self) -> None:
        """After the wind-down: a task that failed meanwhile, or a run that trained nothing, is a failure."""
        chief = self._chief()
        ends = [verdict.TaskEnd(t.plan.name, t.state, t.failure, t.exit_code) for t in self._tasks.values()]
        outputs = {n: t.output for n, t in self._tasks.items() if t.plan.job != PS}
        self._check_log_space(float("inf"))  # now, not at the next second: the run may end first
        lost = self._log_warning.given
        chief_job = role_hint.task_type(chief.plan.env, chief.plan.job)
        hint = role_hint.chief_role_hint(chief.plan.argv, os.getcwd(), chief_job)
        ok, message, code = verdict.confirm(
            self._outcome.message, ends, outputs, chief.plan.name, chief.output.tail, output_lost=lost, hint=hint
        )
        if ok:
            message += wind_down.ending_words(list(self._tasks.values()), self._stop_notes)
        self._outcome = Outcome(ok, message, code)

    def _chief(self) -> TaskRecord:
        return self._tasks.get(f"{CHIEF}:0") or self._tasks[f"{WORKER}:0"]

    def _decide(self, succeeded: bool, message: str, exit_code: int, *, port_conflict=False) -> None:
        if self._outcome is None:
            self._outcome = Outcome(succeeded, message, exit_code, port_conflict)

    # The event loop.
    def _watch(self, done: Callable[[], bool], deadline: float | None) -> None:
        """Handles events until ``done()`` or ``deadline``; stops early on a signal."""
        while not done():
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return
            bound = min(self._console.status_interval, TAIL_SECS)
            if deadline is not None:
                bound = min(bound, deadline - now)
            self._interrupted = False
            exited = self._group.poll(max(0.0, min(bound, self._drills.next_at() - now)))
            if self._interrupted:
                return
            for task in self._tasks.values():
                task.tail.pump()
            self._run_drills()
            for name in exited:
                task = self._tasks[name]
                if task.state == "running":
                    self._on_exit(task)
            self._show_status()

    def _on_signal(self) -> None:
        """The signal fd's reader: a signal stops every task and ends the current wait."""
        numbers = os.read(self._signal_fd, 64)
        if not numbers:
            return
        name = signal.Signals(numbers[-1]).name
        self._console.line(f"launcher: got {name}; stopping every task")
        self._decide(False, f"interrupted by {name}", 128 + numbers[-1])
        self._stop([t for t in self._tasks.values() if self._alive(t)])
        self._interrupted = True

    @staticmethod
    def _alive(task: TaskRecord) -> bool:
        """Started and its exit not handled yet: a task leaves "running" only in _on_exit, so every exit
        the group reports is handled before the run counts the task as ended."""
        return task.state == "running"

    # Task life cycle.
    def _start(self, task: TaskRecord) -> None:
        task.output.note(f"{'start' if task.restarts == 0 else f'restart {task.restarts}'}: {' '.join(task.plan.argv)}")
        try:
            self._group.start(task.plan.name, task.plan.argv, env=task.plan.env, stdout=task.log, stderr=task.log)
        except OSError as err:  # the command does not exist or cannot be run: bad input
            task.state = "not started"
            self._decide(False, f"cannot start {task.plan.name}: {task.plan.argv[0]}: {err.strerror}", EXIT_CONFIG)
            return
        task.started_at = time.monotonic()
        task.state = "running"
        running = [name for name, each in self._tasks.items() if each.state == "running"]
        write_pids(self._log_dir, {name: self._group.process(name).pid for name in running}, self._log_warning)

    def _on_exit(self, task: TaskRecord) -> None:
        """A task's process has ended: one of four named decisions settles what that means."""
        self._release(task)
        code = self._group.returncode(task.plan.name)
        if task.stop_requested:
            task.state = "stopped"
        elif code == 0:
            task.state = "finished"
            self._check_success()
        else:
            task.state = "failed"
            if self._is_port_conflict(code):
                taken = f"{task.plan.name}: port of {task.plan.address} was taken"
                self._decide(False, taken, code, port_conflict=True)
            elif self._may_restart(task, code):
                self._restart(task, code)
            else:
                self._fail_for_good(task, code)

    def _is_port_conflict(self, code: int) -> bool:
        """The task could not bind its port, and the launch retries the whole attempt on fresh ports."""
        return code == EXIT_PORT_IN_USE and self._policy.retry_port_conflicts and self._restarts_allowed

    def _may_restart(self, task: TaskRecord, code: int) -> bool:
        """--restart=on-failure, budget left, and a status that a restart can change (not bad input)."""
        policy = self._policy
        return (
            self._restarts_allowed
            and policy.restart == "on-failure"
            and task.restarts < policy.max_restarts
            and code not in (EXIT_CONFIG, EXIT_ENVIRONMENT)
        )

    def _restart(self, task: TaskRecord, code: int) -> None:
        task.restarts += 1
        self._console.line(
            f"launcher: {task.plan.name} {describe_exit(code, task.drill_killed)}; "
            f"restarting it on {task.plan.address} ({task.restarts}/{self._policy.max_restarts})"
        )
        task.drill_killed = False
        self._start(task)

    def _fail_for_good(self, task: TaskRecord, code: int) -> None:
        """The run fails with this task: why (and why it was not restarted), and where to look."""
        exit_text = describe_exit(code, task.drill_killed)
        where = self._where_to_look(task, code)
        task.failure = f"{task.plan.name} ({task.plan.address}) {exit_text}{self._no_restart_note(task, code)}{where}"
        task.exit_code = code if code > 0 else 1
        self._decide(False, task.failure, task.exit_code)

    def _no_restart_note(self, task: TaskRecord, code: int) -> str:
        policy = self._policy
        if policy.restart != "on-failure":
            return ""
        if code in (EXIT_CONFIG, EXIT_ENVIRONMENT):
            return " (not restarted: a permanent status)"
        if task.restarts >= policy.max_restarts:
            return f" (restart budget spent: {task.restarts}/{policy.max_restarts} restarts used)"
        return ""

    def _where_to_look(self, task: TaskRecord, code: int) -> str:
        """The task's last log lines; for a task killed with what started it (its fork server, gone), not
        those (it is not the cause, and its log does not say what is) but where every log is."""
        lost_with = self._group.process(task.plan.name).lost_with if code < 0 else None
        if lost_with:
            return f" with {lost_with}; every log is in {self._log_dir}"
        tail = "\n".join(f"    {line}" for line in task.output.tail)
        return f"; last lines of {task.log_path}:\n{tail}"

    def _check_success(self) -> None:
        replicas = [t for t in self._tasks.values() if t.plan.job in (CHIEF, WORKER)]
        if self._policy.success_policy == "all_workers":
            if all(t.state == "finished" for t in replicas):
                self._decide(True, "every worker finished with status 0", 0)
            return
        chief = self._chief()
        if chief.state == "finished":
            self._decide(True, f"the chief ({chief.plan.name}) finished with status 0", 0)

    def _release(self, task: TaskRecord) -> None:
        """Counts an exited task's run time and reads what it wrote last (its tail of the log)."""
        task.run_secs += time.monotonic() - task.started_at
        task.tail.pump()

    def _stop(self, tasks: list[TaskRecord], reason: str = "") -> None:
        """Stops ``tasks``; each log says so, and why: ``reason``, else how the run was decided."""
        if not tasks:
            return
        why = reason or (self._outcome.message.splitlines()[0] if self._outcome else "the run is ending")
        for task in tasks:
            task.stop_requested = True
            task.output.note(f"stopping (SIGTERM, then SIGKILL after the grace period): {why}")
        self._group.stop([t.plan.name for t in tasks], self._policy.stop_grace_secs)
        for task in tasks:
            if self._group.returncode(task.plan.name) is not None:
                self._on_exit(task)

    # Chaos drills.
    def _run_drills(self) -> None:
        for job, index, secs in self._drills.due(time.monotonic()):
            task = self._tasks.get(f"{job}:{index}")
            if task is None or not self._alive(task):
                self._console.line(f"launcher: --kill={job}:{index}@{secs:g}s: the task is not running; skipped")
                continue
            self._console.line(f"launcher: --kill drill: SIGKILL {task.plan.name} at {secs:g}s")
            task.output.note(f"killed by the --kill drill at {secs:g}s")
            task.drill_killed = True
            self._group.kill(task.plan.name, signal.SIGKILL)

    # Reporting.
    def _check_log_space(self, now: float) -> None:
        """Warns (once) when the log folder's disk is full: the tasks' own writes then fail unseen."""
        if now - self._space_checked_at < _SPACE_CHECK_SECS or self._log_warning.given:
            return
        self._space_checked_at = now
        try:
            space = os.statvfs(self._log_dir)
        except OSError:
            return
        # Root may write into the blocks a file system reserves; everyone else may not.
        if (space.f_bfree if os.geteuid() == 0 else space.f_bavail) == 0:
            self._log_warning(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))

    def _show_status(self) -> None:
        now = time.monotonic()
        self._check_log_space(now)
        steps = [t.output.global_step for t in self._tasks.values() if t.output.global_step is not None]
        if steps:
            self._rate.add(now, max(steps))
        if now - self._last_usage_at < self._console.status_interval:
            return
        self._last_usage_at = now
        alive = [self._group.process(t.plan.name) for t in self._tasks.values() if self._alive(t)]
        cpu, rss = lifecycle.usage(alive, self._usage_cache)
        text = status_text(
            elapsed=now - self._t0,
            global_step=max(steps) if steps else None,
            rate=self._rate.per_sec,
            states={name: t.state for name, t in self._tasks.items()},
            cpu=cpu,
            rss=rss,
            accuracy=self._latest_accuracy(),
        )
        self._console.status(text, now)

    def _latest_accuracy(self) -> float | None:
        """The evaluator's latest accuracy (an estimator's evaluations, say), else any task's; None before one."""
        printed = {name: t.output.printed_accuracy for name, t in self._tasks.items()}
        evaluated = [value for name, value in printed.items() if value is not None and name.startswith("evaluator")]
        return next(iter(evaluated), None) if evaluated else next((v for v in printed.values() if v is not None), None)

    def _row(self, task: TaskRecord) -> SummaryRow:
        code = self._group.returncode(task.plan.name)
        return SummaryRow(
            task=task.plan.name,
            address=task.plan.address,
            exit_status=exit_status_cell(code, task.state),
            restarts=task.restarts,
            run_secs=task.run_secs,
            steps=task.output.steps,
        )
