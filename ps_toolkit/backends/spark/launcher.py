"""Runs a parameter-server job as one Spark barrier stage: one barrier task per TF task.

The driver makes one partition per task (servers first, as the local launcher
starts them), runs ``spark_tasks.run_barrier_task`` on each as one barrier stage,
and judges the run from what comes back: every task's status and output, which
become the run folder's task logs, summary table and verdict through the local
launcher's own ``TaskOutput`` and ``launcher.report``. A task that fails with a
retryable status fails the stage; Spark runs it again (``--max_restarts`` more
times with --restart=on-failure), every task on fresh ports, and the chief
resumes from its checkpoint, which must be on storage every executor reaches.

Example:
    options = LaunchOptions(Topology(num_ps=1, num_workers=2), command=default_command(["--train_steps=200"]))
    result = launch(options, SparkOptions(master="spark://127.0.0.1:7077"))
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import re
import signal
import sys
import threading

from ps_toolkit.backends import local as launcher
from ps_toolkit.backends.local import LaunchOptions, RunResult
from ps_toolkit.backends.spark.executor_python import executor_python, missing_toolkit_line
from ps_toolkit.backends.spark.tasks import FAILURE_MARKER, run_barrier_task
from ps_toolkit.base import paths
from ps_toolkit.base.errors import EXIT_ENVIRONMENT, ConfigError
from ps_toolkit.cluster.config import CHIEF, WORKER
from ps_toolkit.launch import verdict, work_evidence
from ps_toolkit.launch.engine_env import carried_env
from ps_toolkit.launch.status import Console, SummaryRow, describe_exit, exit_status_cell
from ps_toolkit.launch.supervisor import LogFolderWarning, Outcome
from ps_toolkit.launch.task_output import TaskOutput
from ps_toolkit.launch.task_plan import START_ORDER

_INPUT_FORMATS = ("parquet", "csv", "json", "orc")
_MASTER = re.compile(r"^(spark://[\w.\-:,\[\]]+|local-cluster\[\d+,\s*\d+,\s*\d+\]|local\[\d+(,\s*\d+)?\])$")


@dataclasses.dataclass(frozen=True)
class SparkOptions:
    """Where the stage runs and what each executor gets; ``conf`` is passed to Spark as given."""

    master: str
    executor_memory: str = "1g"
    conf: tuple[tuple[str, str], ...] = ()
    # The replicas' input (spark_partition): rows of a file Spark reads (input_path, in input_format: parquet,
    # csv with a header, json, orc) dealt round-robin over the chief and workers.
    input_path: str | None = None
    input_format: str = "parquet"

    def __post_init__(self):
        if self.input_format not in _INPUT_FORMATS:
            raise ConfigError(f"--input_format={self.input_format!r}: one of {', '.join(_INPUT_FORMATS)}")
        local = self.input_path is not None and ("://" not in self.input_path or self.input_path.startswith("file:"))
        # A local path is checked before Spark starts (whose own start-up writes to stderr); others Spark reads.
        if local and not os.path.exists(self.input_path.removeprefix("file://").removeprefix("file:")):
            raise ConfigError(f"--input_path={self.input_path}: no such file or folder")
        if not _MASTER.match(self.master):
            raise ConfigError(
                f"--master={self.master!r}: give spark://HOST:PORT, local-cluster[WORKERS,CORES,MEMORY_MB] "
                "or local[N] (a barrier stage needs one slot per task)"
            )


def launch(options: LaunchOptions, spark_options: SparkOptions, console: Console | None = None) -> RunResult:
    """Runs the job as one barrier stage to its end and reports, as ``launcher.launch`` does locally."""
    if options.topology.explicit:
        raise ConfigError("--*_hosts: on Spark every task's address is its executor's, chosen by the launch")
    if options.policy.kills:
        raise ConfigError("--kill drills are the local and Ray launchers': on Spark, kill a task's process")
    console = console or Console(sys.stdout)
    log_dir = launcher.make_run_dir(options.log_dir)
    console.line(f"launch_spark: run folder {log_dir}")
    log_warning = LogFolderWarning(log_dir, console.line)
    try:
        outcome = _run_stage(options, spark_options, console, log_dir, log_warning)
        return launcher.report(outcome, log_dir, console, log_warning, chart=options.chart)
    finally:
        paths.release_run_dir(log_dir)


def _run_stage(options: LaunchOptions, spark_options: SparkOptions, console: Console, log_dir: str, log_warning):
    from pyspark.sql import SparkSession

    counts = options.topology.jobs_for_ports(range(1, options.topology.num_tasks + 1))
    roles = [(job, index) for job in START_ORDER for index in range(len(counts.get(job, ())))]
    retry = options.policy.restart == "on-failure"
    python = executor_python(spark_options.master, dict(spark_options.conf))
    builder = (
        SparkSession.builder.master(spark_options.master)
        .appName(f"ps_toolkit {os.path.basename(log_dir)}")
        .config("spark.executor.memory", spark_options.executor_memory)
        .config("spark.ui.enabled", "false")
        # A failed barrier stage is run again this many times in all (the restarts, then the first run).
        .config("spark.stage.maxConsecutiveAttempts", str(options.policy.max_restarts + 1 if retry else 1))
    )
    for key, value in spark_options.conf:
        builder = builder.config(key, value)
    console.line(f"launch_spark: one barrier stage of {len(roles)} tasks on {spark_options.master}")
    # py4j logs each connection it closes at INFO, after the verdict: the console keeps its warnings only.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    session = _session(builder, python)
    with_rows = spark_options.input_path is not None
    task = functools.partial(
        run_barrier_task,
        roles=roles,
        command=options.command,
        env=carried_env(options.env),
        retry=retry,
        with_rows=with_rows,
    )
    if with_rows:
        try:
            source = _dealt(_read_input(session, spark_options), roles)
        except ConfigError:
            session.stop()
            raise
    else:
        source = session.sparkContext.parallelize(range(len(roles)), len(roles))
    # The barrier stage feeds a shuffle: Spark retries a failed barrier shuffle-map stage as a whole, while a
    # failed barrier result stage is never retried ("Could not recover from a failed barrier ResultStage").
    barrier = source.barrier().mapPartitions(task)
    stage = barrier.repartition(1)
    previous = signal.signal(signal.SIGTERM, _cancel_on_term(session))
    timer = _StageTimeout(session, options.policy.timeout_secs)
    try:
        results = stage.collect()
        # The stage's attempts after the first are its restarts (every task was run again each time).
        info = session.sparkContext.statusTracker().getStageInfo(results[0][4]) if results else None
        restarts = info.currentAttemptId if info is not None else 0
    except KeyboardInterrupt:  # PySpark's SIGINT handler (or ours for SIGTERM) has cancelled the stage
        return _without_tasks(Outcome(False, "interrupted; the stage was cancelled", 128 + signal.SIGINT))
    except Exception as err:  # py4j's error carries the failed task's message in its text
        if timer.fired:
            message = f"the run did not end within --timeout_secs={options.policy.timeout_secs:g}; stage cancelled"
            return _without_tasks(Outcome(False, message, 1))
        missing = missing_toolkit_line(str(err), python)
        if missing is not None:
            return _without_tasks(Outcome(False, missing, EXIT_ENVIRONMENT))
        return _without_tasks(Outcome(False, _failure(str(err), spark_options.master), _failed_status(str(err))))
    finally:
        timer.cancel()
        signal.signal(signal.SIGTERM, previous)
        session.stop()
    return _judge(results, restarts, options, log_dir, console, log_warning)


def _session(builder, python: str):
    """The Spark session whose executors run ``python``: PySpark takes its workers' interpreter from
    PYSPARK_PYTHON when the context starts (spark.pyspark.python is read by spark-submit only)."""
    before = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = python
    try:
        return builder.getOrCreate()
    finally:
        if before is None:
            os.environ.pop("PYSPARK_PYTHON", None)
        else:
            os.environ["PYSPARK_PYTHON"] = before


def _read_input(session, spark_options: SparkOptions):
    """The input DataFrame; a path Spark cannot read is bad input, named."""
    options = {"header": "true", "inferSchema": "true"} if spark_options.input_format == "csv" else {}
    try:
        return session.read.load(spark_options.input_path, format=spark_options.input_format, **options)
    except Exception as err:  # Spark's AnalysisException and py4j errors
        first = next((line for line in str(err).splitlines() if line.strip()), type(err).__name__)
        raise ConfigError(f"--input_path={spark_options.input_path}: Spark cannot read it: {first[:300]}") from None


def _dealt(frame, roles: list[tuple[str, int]]):
    """The DataFrame's rows dealt round-robin over the replicas' partitions (one partition per task)."""
    replicas = [index for index, (job, _) in enumerate(roles) if job in (CHIEF, WORKER)]
    count = len(replicas)
    keyed = frame.rdd.zipWithIndex().map(lambda pair: (replicas[pair[1] % count], pair[0]))
    return keyed.partitionBy(len(roles), lambda key: key).values()


class _StageTimeout:
    """Cancels the stage after ``secs`` (None: never); ``fired`` says whether it did."""

    def __init__(self, session, secs: float | None):
        self.fired = False
        self._session = session
        self._timer = None if secs is None else threading.Timer(secs, self._fire)
        if self._timer is not None:
            self._timer.daemon = True
            self._timer.start()

    def _fire(self) -> None:
        self.fired = True
        self._session.sparkContext.cancelAllJobs()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


def _without_tasks(outcome: Outcome) -> Outcome:
    """A stage that did not complete returns no task's output: the summary has no rows."""
    outcome.rows, outcome.outputs = [], {}
    return outcome


def _cancel_on_term(session):
    def cancel(signum, frame) -> None:
        session.sparkContext.cancelAllJobs()
        raise KeyboardInterrupt

    return cancel


def _judge(results: list[tuple], restarts: int, options: LaunchOptions, log_dir: str, console: Console, log_warning):
    """The run's Outcome from every task's (name, address, status, secs, stage, output): the chief's
    status decides, as in the local launcher; the outputs become the tasks' logs."""
    echo = None if options.quiet else console.line
    pattern = work_evidence.compile_pattern(options.policy.success_pattern)
    outputs, rows, codes = {}, [], {}
    for name, address, code, secs, _stage, output in results:
        path = os.path.join(log_dir, name.replace(":", "-") + ".log")
        with open(path, "ab", buffering=0) as log:
            task_output = TaskOutput(name, log, echo, on_log_error=log_warning, success_pattern=pattern)
            task_output.feed("stdout", output)
            task_output.feed("stdout", b"")
            task_output.close()
        outputs[name], codes[name] = task_output, code
        state = "finished" if code == 0 else "failed"
        rows.append(SummaryRow(name, address, exit_status_cell(code, state), restarts, secs, task_output.steps))
    chief = f"{CHIEF}:0" if f"{CHIEF}:0" in codes else f"{WORKER}:0"
    if options.policy.success_policy == "all_workers":
        decider = [n for n in codes if n.split(":")[0] in (CHIEF, WORKER) and codes[n] != 0]
    else:
        decider = [chief] if codes[chief] != 0 else []
    if decider:
        name = decider[0]
        address = next(row.address for row in rows if row.task == name)
        message = f"{name} ({address}) {describe_exit(codes[name], False)}; its log: {log_dir}"
        outcome = Outcome(False, message, codes[name] if codes[name] > 0 else 1)
    else:
        success = "every worker finished with status 0" if options.policy.success_policy == "all_workers" else None
        outcome = _confirmed(success or f"the chief ({chief}) finished with status 0", codes, rows, outputs, chief)
    outcome.rows, outcome.outputs = rows, outputs
    return outcome


def _confirmed(message: str, codes: dict, rows: list[SummaryRow], outputs: dict, chief: str) -> Outcome:
    """The local launcher's rule on a success: no other task failed, and training happened."""
    addresses = {row.task: row.address for row in rows}
    ends = [
        verdict.TaskEnd(name, "finished")
        if code == 0
        else verdict.TaskEnd(name, "failed", f"{name} ({addresses[name]}) {describe_exit(code, False)}", max(code, 1))
        for name, code in codes.items()
    ]
    ok, message, code = verdict.confirm(message, ends, outputs, chief, list(outputs[chief].tail))
    return Outcome(ok, message, code)


def _failure(text: str, master: str) -> str:
    """The failed task's own message when Spark's error carries one, else Spark's first line."""
    at = text.find(FAILURE_MARKER)
    if at >= 0:
        lines = text[at + len(FAILURE_MARKER) :].strip().split(" ", 1)[1].splitlines()
        tail = [line for line in lines[1:21] if not line.startswith(("\tat ", "Caused by", "Traceback"))]
        return "\n    ".join([f"the stage failed after its last attempt: {lines[0]}", *tail])
    first = next((line for line in text.splitlines() if line.strip()), text)
    return f"the Spark stage on {master} failed: {first[:500]}"


def _failed_status(text: str) -> int:
    match = re.search(re.escape(FAILURE_MARKER) + r" (-?\d+) ", text)
    code = int(match.group(1)) if match else 1
    return code if code > 0 else 1


def run_spark(options: LaunchOptions, settings: SparkOptions) -> RunResult:
    """The ``spark`` backend (backends.registry): ``launch`` with the Spark settings."""
    return launch(options, settings)
