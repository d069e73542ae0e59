"""Local multi-process clusters: ports, run folder, signals, retries and the final report.

``launch()`` is what ``scripts/launch_local.py`` calls: it reserves loopback
ports, starts every task (see ``supervisor``), relaunches the whole cluster on
fresh ports when a task finds its port taken, and at the end writes a summary
table and a progress chart into the run folder.

Its own output never holds the run up: the console is best-effort
(``console_stream``: a reader that is slow or gone costs lines, not progress),
and a log folder that cannot be written (a full disk) costs one warning line.
What the tasks started dies with the run, even when the launcher is SIGKILLed
(``lifecycle.RunReaper``).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import sys
import threading
from collections.abc import Mapping

from ps_toolkit.base import paths
from ps_toolkit.base.errors import EXIT_PORT_IN_USE, ConfigError
from ps_toolkit.launch import charts
from ps_toolkit.launch.console_stream import BestEffortStream
from ps_toolkit.launch.policy import Policy
from ps_toolkit.launch.ports import reserve_ports
from ps_toolkit.launch.status import Console, summary_table
from ps_toolkit.launch.supervisor import ClusterSupervisor, LogFolderWarning
from ps_toolkit.launch.task_plan import CHIEF_ROLES, Topology, check_task_args, plan_tasks, task_env
from ps_toolkit.process import lifecycle
from ps_toolkit.process.starter import START_METHODS, make_starter

CHART_FILE = "progress.png"
SUMMARY_FILE = "summary.txt"


@dataclasses.dataclass(frozen=True)
class LaunchOptions:
    """Everything one local run needs.

    Example:
        options = LaunchOptions(Topology(num_ps=1, num_workers=2), command=default_command(["--train_steps=200"]))
        result = launch(options)
        result.exit_code     # 0 when the chief finished with 0, no task failed for good and training happened
        LaunchOptions(..., policy=Policy(restart="on-failure", kills=(("ps", 0, 5.0),)))   # a chaos drill
    """

    topology: Topology
    command: tuple[str, ...]
    log_dir: str | None = None
    quiet: bool = False
    chart: bool = True  # CHART_FILE in the run folder at the end
    policy: Policy = Policy()
    port_attempts: int = 3
    env: Mapping[str, str] | None = None
    # fork: the toolkit's task scripts are forked from one process that imported TensorFlow
    # (ps_toolkit.process.fork_server: the host's, named by PS_TOOLKIT_FORK_SERVER, or the
    # launch's own); exec: every task is a fresh process, as any other command is.
    start_method: str = "fork"
    chief_role: str = "chief"  # "master": the chief's name in TF_CONFIG and the flags (task_plan)
    task_args: str | None = None  # None: the classic cluster flags; "none": TF_CONFIG alone; or a template

    def __post_init__(self):
        object.__setattr__(self, "command", tuple(self.command))
        if not self.command:
            raise ConfigError("the task command is empty")
        if self.start_method not in START_METHODS:
            raise ConfigError(f"--start_method={self.start_method!r}; valid: {', '.join(START_METHODS)}")
        if self.chief_role not in CHIEF_ROLES:
            raise ConfigError(f"--chief_role_name={self.chief_role!r}; valid: {', '.join(CHIEF_ROLES)}")
        check_task_args(self.task_args)
        if self.port_attempts < 1:
            raise ConfigError(f"port_attempts={self.port_attempts} must be at least 1")
        jobs = self.topology.jobs_for_ports(range(1, self.topology.num_tasks + 1))
        for job, index, _ in self.policy.kills:
            if index >= len(jobs.get(job, ())):
                raise ConfigError(f"--kill={job}:{index}@...: the cluster has no task {job}:{index}")


@dataclasses.dataclass(frozen=True)
class RunResult:
    """How a run ended: exit status, message, the summary rows and each task's final result."""

    exit_code: int
    message: str
    log_dir: str
    rows: tuple
    results: Mapping[str, dict]

    @property
    def succeeded(self) -> bool:
        return self.exit_code == 0


def make_run_dir(log_dir: str | None) -> str:
    """The run folder: ``log_dir`` (created if needed) or a fresh one under this user's
    private ``runs/`` folder, where only the newest ``paths.KEEP_RUNS`` are kept."""
    if log_dir:
        try:
            os.makedirs(log_dir, exist_ok=True)
        except OSError as err:
            raise ConfigError(f"--log_dir={log_dir}: cannot create it: {err.strerror}") from None
        return os.path.abspath(log_dir)
    return paths.new_run_dir("run")


def launch(options: LaunchOptions, console: Console | None = None) -> RunResult:
    """Runs a local cluster to its end and reports; see the module docstring."""
    stream = _best_effort_stdout() if console is None else None
    console = console or Console(stream or sys.stdout)
    try:
        return _launch(options, console)
    finally:
        if stream is not None:
            stream.close()


def _best_effort_stdout() -> BestEffortStream | None:
    """sys.stdout made best-effort, or None when it has no file descriptor (a test's capture)."""
    try:
        return BestEffortStream(sys.stdout)
    except (OSError, ValueError, AttributeError):  # io.UnsupportedOperation is both of the first two
        return None


def _launch(options: LaunchOptions, console: Console) -> RunResult:
    log_dir = make_run_dir(options.log_dir)
    console.line(f"launcher: run folder {log_dir}")
    log_warning = LogFolderWarning(log_dir, console.line)
    reaper = lifecycle.RunReaper()
    try:
        outcome = _attempts(options, console, log_dir, log_warning, reaper.add)
    finally:
        reaper.close()
    try:
        return report(outcome, log_dir, console, log_warning, chart=options.chart)
    finally:
        paths.release_run_dir(log_dir)


def _attempts(options: LaunchOptions, console: Console, log_dir: str, log_warning, on_start):
    """Runs the cluster, again on fresh ports after a port conflict (at most ``port_attempts`` times)."""
    # Addresses the user gave cannot be redrawn: a port clash on them is final.
    policy = dataclasses.replace(options.policy, retry_port_conflicts=not options.topology.explicit)
    env = task_env(options.env)
    starter = make_starter(options.start_method, note=console.line)
    with signals_wake() as signal_fd:
        for attempt in range(1, options.port_attempts + 1):
            reservation = None if options.topology.explicit else reserve_ports(options.topology.num_tasks)
            try:
                jobs = options.topology.jobs_for_ports(reservation.ports if reservation else ())
                plans = plan_tasks(
                    jobs, options.command, base_env=env, chief_role=options.chief_role, task_args=options.task_args
                )
                console.line("launcher: cluster " + ", ".join(f"{p.name}={p.address}" for p in plans))
                supervisor = ClusterSupervisor(
                    plans,
                    log_dir=log_dir,
                    policy=policy,
                    console=console,
                    quiet=options.quiet,
                    starter=starter,
                    log_warning=log_warning,
                    on_start=on_start,
                )
                outcome = supervisor.run(signal_fd=signal_fd)
            finally:
                if reservation is not None:
                    reservation.release()
            if not outcome.port_conflict:
                break
            if attempt < options.port_attempts:
                console.line(f"launcher: {outcome.message}; relaunching the cluster on new ports")
        else:
            outcome.message += f"; gave up after {options.port_attempts} attempts"
            outcome.exit_code = EXIT_PORT_IN_USE
    return outcome


def report(outcome, log_dir: str, console: Console, log_warning: LogFolderWarning, *, chart: bool) -> RunResult:
    """Writes the summary, the chart and the verdict of a supervised run (any engine's) and returns its result."""
    table = summary_table(outcome.rows) + _last_lines(outcome.outputs)
    verdict = ("succeeded: " if outcome.succeeded else "FAILED: ") + outcome.message + _scores(outcome.outputs)
    chart_path = os.path.join(log_dir, CHART_FILE)
    drawn = False
    try:
        paths.write_file_nofollow(os.path.join(log_dir, SUMMARY_FILE), table + "\n\n" + verdict + "\n")
        if chart:
            drawn = charts.write_progress_chart({n: o.progress for n, o in outcome.outputs.items()}, chart_path)
    except OSError as err:  # the console still gets the table and the verdict
        log_warning(err)
    console.line(table)
    if drawn:
        console.line(f"launcher: chart {chart_path}")
    console.line(f"launcher: logs in {log_dir}")
    console.line(f"launcher: {verdict}")
    results = {name: out.result for name, out in outcome.outputs.items() if out.result is not None}
    return RunResult(outcome.exit_code, outcome.message, log_dir, tuple(outcome.rows), results)


def _scores(outputs: Mapping) -> str:
    """The chief's final loss and its evaluation's metrics, when its last line reported them; else the
    accuracy a task of a script of its own printed last (the chief's first)."""
    for name in ("chief:0", "worker:0"):
        result = outputs[name].result if name in outputs else None
        if result:
            scores = {"final_loss": result.get("final_loss")}
            eval_metrics = result.get("eval")
            if isinstance(eval_metrics, dict):
                scores.update({f"eval {key}": value for key, value in eval_metrics.items()})
            else:
                scores["test_accuracy"] = result.get("test_accuracy")
            parts = [f"{key} {value:.4g}" for key, value in scores.items() if isinstance(value, int | float)]
            return f" ({', '.join(parts)})" if parts else ""
    printed = [(name, out.printed_accuracy) for name, out in _chief_first(outputs) if out.printed_accuracy is not None]
    if printed:
        name, accuracy = printed[0]
        return f" (accuracy {accuracy:.4g}, printed by {name})"
    return ""


def _last_lines(outputs: Mapping) -> str:
    """Under the table, the last output line of each task that reported no toolkit result
    (a script of its own): what it said last, e.g. its accuracy."""
    lines = [
        f"{name}: {out.last_stdout_line.strip()[:200]}"
        for name, out in outputs.items()
        if out.result is None and out.last_stdout_line and not out.progress
    ]
    return "".join(f"\n{line}" for line in (["", "last lines:"] + lines if lines else []))


def _chief_first(outputs: Mapping) -> list:
    return sorted(outputs.items(), key=lambda item: item[0] not in ("chief:0", "worker:0"))


class signals_wake:
    """Turns SIGINT/SIGTERM into bytes on a socket the event loop waits on.

    Only the main thread can install handlers; elsewhere the fd is None and
    the caller's own signal handling applies.
    """

    _SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __enter__(self) -> int | None:
        if threading.current_thread() is not threading.main_thread():
            return None
        self._reader, self._writer = socket.socketpair()
        self._writer.setblocking(False)
        self._old_fd = signal.set_wakeup_fd(self._writer.fileno(), warn_on_full_buffer=False)
        self._old = {sig: signal.signal(sig, _ignore) for sig in self._SIGNALS}
        return self._reader.fileno()

    def __exit__(self, *exc_info) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, handler in self._old.items():
            signal.signal(sig, handler)
        signal.set_wakeup_fd(self._old_fd)
        self._reader.close()
        self._writer.close()


def _ignore(signum, frame) -> None:
    """The wake-up fd carries the signal to the event loop; nothing to do here."""


def run_local(options: LaunchOptions, settings: None = None) -> RunResult:
    """The ``local`` backend (backends.registry): every task a process on this machine; ``settings`` unused."""
    del settings  # the local launch is described by ``options`` alone
    return launch(options)
