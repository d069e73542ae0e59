"""A task's output: its log file, its console lines, and the progress it reports.

A task launched by the launcher writes its stdout and stderr straight into its
log file (``LOG``: one stream, in the order written), so it never waits on the
launcher; ``LogTail`` reads what it appends. Each line then goes, prefixed with
the task (``[worker:1] ...``), to the console when ``ConsoleFilter`` lets it:
the toolkit's own lines and the task's plain output, not TensorFlow's (see
there). Lines that start with the progress prefix are parsed into records
(global step, loss, steps/s) for the status line and the chart; a worker's
last plain output line, a JSON object, is its final result.
"""

from __future__ import annotations

import collections
import json
import os
import re
from collections.abc import Callable

from ps_toolkit.base.progress_lines import LOG_ONLY_PREFIX, PROGRESS_PREFIX
from ps_toolkit.launch import source_files
from ps_toolkit.launch.tf_messages import CONTINUATIONS, INSTRUCTIONS, KERNEL_DEVICES, PLACEMENT, SOURCE_LOCATION
from ps_toolkit.launch.work_evidence import WorkSigns

TAIL_LINES = 20
# The stream name of a log file that a task writes both its stdout and stderr into.
LOG = "log"
# What one LogTail.pump reads at most, so that one chatty task cannot hold up the event loop.
PUMP_BYTES = 4 << 20
# At the end, more unread output than this is skipped, but for its last TAIL_KEEP_BYTES.
FINISH_BYTES = 64 << 20
TAIL_KEEP_BYTES = 1 << 20


def parse_progress(line: str) -> dict | None:
    """The JSON record of a progress line, or None for any other line."""
    if not line.startswith(PROGRESS_PREFIX):
        return None
    try:
        record = json.loads(line[len(PROGRESS_PREFIX) :])
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def parse_result(line: str | None) -> dict | None:
    """A task's final JSON line, or None: a worker's has ``final_loss`` or ``local_steps``, a ps's
    ``replicas_done`` (ps_toolkit/task/runner.py writes both)."""
    if not line or not line.lstrip().startswith("{"):
        return None
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if isinstance(record, dict) and ("final_loss" in record or "local_steps" in record or "replicas_done" in record):
        return record
    return None


# absl's log prefix, Python's and C++'s: "I1123 06:12:58.170337 139622 server.py:103] ..."
# and "E0000 00:00:1795414374.349964   10728 cuda_platform.cc:52] ...".
_LOG_LINE = re.compile(r"^([IWEF])\d{4} \d\d:\d\d:\d+\.\d+\s+\d+\s+([^\s:\]]+):\d+\] ")
_ABSL_PREAMBLE = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
_ALWAYS_SHOWN = re.compile(r"^(Traceback \(most recent call last\)|watchdog: )|: error: ")
# A library's Python logging in the default format: "INFO:tensorflow:Graph was finalized." (absl repeats it
# in its own format, with the source file, on the next line).
_LIBRARY_LOGGING = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL):(tensorflow|absl|keras|tf_keras)\b")


def _json_object(line: str) -> bool:
    if not line.startswith("{"):
        return False
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


class ConsoleFilter:
    """Decides which task lines the console shows; the log file always gets every line.

    Shown: the toolkit's log lines, the task's own plain output (print, a legacy
    script's logging), final result lines, tracebacks and one-line errors.
    Hidden: TensorFlow's C++ log lines (cuInit, ABORTED, "UNAVAILABLE: Socket
    closed", ...) except fatal ones, log lines from TensorFlow's, absl's and
    Keras's Python files, absl's "before InitializeLog" preamble, the placements
    ``log_device_placement`` prints, the lines that continue a hidden message,
    and progress records (the status line and the chart show them).

    On the merged ``LOG`` stream a line that continues a hidden message is
    only recognised within one read (``end_of_read``): a message is written
    in one write, while the task's own print that follows it is a write of
    its own, usually read later. A JSON object line (the toolkit's results) is
    always shown.
    """

    def __init__(self):
        self._showing = {"stdout": True, "stderr": True, LOG: True}
        self._after_instructions = {"stdout": False, "stderr": False, LOG: False}

    def shows(self, stream: str, line: str) -> bool:
        if line.startswith((PROGRESS_PREFIX, LOG_ONLY_PREFIX)):
            return False
        match = _LOG_LINE.match(line)
        if match:
            level, source = match.groups()
            if source.endswith(".py"):
                shown = source in source_files.toolkit_files() or source not in source_files.library_files()
            else:
                shown = level == "F"
        elif line.startswith(_ABSL_PREAMBLE) or _LIBRARY_LOGGING.match(line) or PLACEMENT.match(line):
            shown = False
        elif _ALWAYS_SHOWN.search(line) or _json_object(line):
            shown = True
        elif not self._showing[stream] and self._continues_hidden_message(stream, line):
            return False
        else:
            shown = True  # the task's own plain output
        self._showing[stream] = shown
        self._after_instructions[stream] = False
        return shown

    def _continues_hidden_message(self, stream: str, line: str) -> bool:
        """Whether a plain line after a hidden one is that message's next line, not the task's own output.

        Only the forms TensorFlow's multi-line messages take: indented and blank lines, their
        known later lines (deprecations, gRPC errors, "Object was never used", the placer's
        colocation dump), and the one line after "Instructions for updating:". Anything else is
        shown: a line of the task's own is never lost to the console.
        """
        after_instructions = self._after_instructions[stream]
        self._after_instructions[stream] = line.startswith(INSTRUCTIONS)
        if after_instructions or not line or line[:1].isspace() or line.startswith(CONTINUATIONS):
            return True
        return KERNEL_DEVICES.match(line) is not None or SOURCE_LOCATION.match(line) is not None

    def end_of_read(self, stream: str) -> None:
        """What ``stream`` said so far has been read: the next plain line starts a message of its own."""
        self._showing[stream] = True


# What a script of its own (a legacy one) prints about its progress and result, e.g.
# "worker=0, final accuracy = 0.91", "local_step=250", "done after 580 local steps".
_PRINTED_ACCURACY = re.compile(r"accuracy\b[^0-9\n]{0,16}?(\d+(?:\.\d+)?)", re.IGNORECASE)
_PRINTED_LOCAL_STEP = re.compile(r"local[ _]steps?\s*[=:]?\s*(\d+)|(\d+) local steps", re.IGNORECASE)
_PRINTED_LOSS = re.compile(r"\bloss\b[^0-9\n]{0,16}?(\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)", re.IGNORECASE)
# The global step in TensorFlow's and the estimator's own log lines, e.g. "Saving checkpoints for 1000 into
# /m/model.ckpt.", "loss = 0.31, step = 200 (0.5 sec)", "Saving dict for global step 1000: accuracy = 0.98, ...",
# and in a script's prints ("global_step: 120", "Step 40 of 200").
_LOGGED_STEP = re.compile(
    r"Saving checkpoints for (\d+) into|\bstep = (\d+)|global[ _]step[ =:]+(\d+)|^\s*step[ =:]+(\d+)", re.IGNORECASE
)


class TaskOutput:
    """Collects one task's output across its restarts.

    Example:
        out = TaskOutput("worker:1", open(path, "ab"), echo=print)
        out.feed("stdout", b'ps_toolkit progress: {"global_step": 3}\\n')
        out.progress[-1]["global_step"]   # 3
    """

    def __init__(
        self,
        name: str,
        log_file,
        echo: Callable[[str], None] | None,
        *,
        tailed: bool = False,
        on_log_error: Callable[[OSError], None] | None = None,
        success_pattern: re.Pattern | None = None,
    ):
        self.name = name
        self._log = log_file
        self._echo = echo
        # tailed: the task writes ``log_file`` itself and its lines come back through feed(LOG, ...);
        # the launcher's own notes in it are then skipped when they come back.
        self._tailed = tailed
        self._notes: collections.Counter[str] = collections.Counter()
        self._on_log_error = on_log_error
        self._console = ConsoleFilter()
        self._partial = {"stdout": b"", "stderr": b"", LOG: b""}
        self.progress: list[dict] = []
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.last_stdout_line: str | None = None
        self._result_line: str | None = None  # the current incarnation's last result line
        # From lines that are not the toolkit's records: what a script of its own printed.
        self.printed_accuracy: float | None = None
        self.printed_local_step: int | None = None
        self.printed_loss: float | None = None
        # The highest global step a line of any kind named (the toolkit's records aside).
        self.logged_global_step: int | None = None
        # What shows work other than training (an export, a result table, --success_pattern's line).
        self.work = WorkSigns(success_pattern)

    def note(self, text: str) -> None:
        """A line from the launcher itself (start, restart, stop) into the log."""
        line = f"--- {text} ---"
        if self._write_log(line) and self._tailed:
            self._notes[line] += 1
        elif not self._tailed:
            self._new_incarnation(line)

    def feed(self, stream: str, data: bytes) -> None:
        """Takes bytes read from ``stream``; ``b''`` means the stream has closed."""
        if not data:
            rest, self._partial[stream] = self._partial[stream], b""
            if rest:
                self._line(stream, rest)
            return
        lines = (self._partial[stream] + data).split(b"\n")
        self._partial[stream] = lines.pop()
        for raw in lines:
            self._line(stream, raw)
        if stream == LOG:
            self._console.end_of_read(LOG)

    def _line(self, stream: str, raw: bytes) -> None:
        line = raw.decode("utf-8", "replace").rstrip("\r")
        if self._notes[line]:  # the launcher's own note, read back from the log
            self._notes[line] -= 1
            self._new_incarnation(line)
            return
        if not self._tailed:
            self._write_log(line)
        self.tail.append(line)
        self._scan_step(line)
        shown = self._console.shows(stream, line)
        record = parse_progress(line) if stream != "stderr" else None
        self.work.scan(line, record)
        if record is not None:
            self.progress.append(record)
            self._scan_evaluation(record)
        # On the merged LOG stream, the task's plain output is what is neither a log record nor hidden.
        plain = stream == "stdout" or (stream == LOG and (record is not None or (shown and not _LOG_LINE.match(line))))
        if plain and line.strip():
            self.last_stdout_line = line
            if parse_result(line) is not None:
                self._result_line = line
            elif record is None:
                self._scan_printed(line)
        if self._echo is not None and shown:
            self._echo(f"[{self.name}] {line}")

    def _new_incarnation(self, note: str) -> None:
        """After a (re)start note, a result line of the task's previous run is no longer its result."""
        if note.startswith(("--- start", "--- restart")):
            self._result_line = None

    def skipped(self, count: int) -> None:
        """Says on the console that ``count`` bytes of the log were not read back (a backlog at the end)."""
        if self._echo is not None:
            self._echo(f"[{self.name}] ... {count} bytes of output not shown here; the log file has them ...")

    def _scan_step(self, line: str) -> None:
        """Any line's global step (a log line of TensorFlow's, the estimator's, or a script's print)."""
        if line.startswith(PROGRESS_PREFIX):
            return
        for groups in _LOGGED_STEP.findall(line):
            step = int(next(g for g in groups if g))
            self.logged_global_step = max(step, self.logged_global_step or 0)

    def _scan_evaluation(self, record: dict) -> None:
        """An evaluator's metrics (an estimator's, in a record marked ``evaluation``) count as printed results."""
        if record.get("evaluation") is not True:
            return
        if isinstance(record.get("accuracy"), int | float):
            self.printed_accuracy = float(record["accuracy"])
        if isinstance(record.get("loss"), int | float):
            self.printed_loss = float(record["loss"])

    def _scan_printed(self, line: str) -> None:
        accuracy = _PRINTED_ACCURACY.findall(line)
        if accuracy:
            self.printed_accuracy = float(accuracy[-1])
        loss = _PRINTED_LOSS.findall(line)
        if loss:
            self.printed_loss = float(loss[-1])
        steps = _PRINTED_LOCAL_STEP.findall(line)
        if steps:
            self.printed_local_step = int(next(g for g in steps[-1] if g))

    def _write_log(self, line: str) -> bool:
        """Appends ``line`` to the log; False when it could not (``on_log_error`` was told why)."""
        try:
            self._log.write(line.encode("utf-8", "replace") + b"\n")
            self._log.flush()
        except OSError as err:
            if self._on_log_error is None:
                raise
            self._on_log_error(err)
            return False
        return True

    @property
    def result(self) -> dict | None:
        """The task's final result: its last result line, even when other output (a warning) follows it."""
        return parse_result(self._result_line)

    @property
    def steps(self) -> int | None:
        """Local steps this task ran: from its final line, else its last progress line, else
        the last local step it printed (a script of its own)."""
        result = self.result
        if result is not None and isinstance(result.get("local_steps"), int):
            return result["local_steps"]
        for record in reversed(self.progress):
            if isinstance(record.get("local_step"), int):
                return record["local_step"]
        return self.printed_local_step

    @property
    def global_step(self) -> int | None:
        """The highest global step this task reported: its result, progress records or log lines."""
        steps = [record.get("global_step") for record in self.progress]
        result = self.result
        steps += [result.get("global_step") if result else None, self.logged_global_step]
        steps = [step for step in steps if isinstance(step, int) and not isinstance(step, bool)]
        return max(steps) if steps else None

    def close(self) -> None:
        for stream in self._partial:
            self.feed(stream, b"")
        try:
            self._log.close()
        except OSError as err:  # a last buffered write that did not fit
            if self._on_log_error is None:
                raise
            self._on_log_error(err)


class LogTail:
    """Reads what a task appends to its log file, from the end it had when made, into ``output``.

    Example:
        tail = LogTail(path, output)   # before the task starts
        tail.pump()                    # whenever the event loop wakes; returns the bytes read
        tail.finish()                  # once the task and its descendants are gone
    """

    def __init__(self, path: str, output: TaskOutput):
        self._output = output
        self._fd: int | None = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        os.lseek(self._fd, 0, os.SEEK_END)

    def pump(self, max_bytes: int = PUMP_BYTES) -> int:
        read = 0
        while self._fd is not None and read < max_bytes:
            data = os.read(self._fd, min(1 << 16, max_bytes - read))
            if not data:
                break
            self._output.feed(LOG, data)
            read += len(data)
        return read

    def finish(self) -> None:
        """Reads the rest and closes; of a backlog over FINISH_BYTES, only the last TAIL_KEEP_BYTES."""
        if self._fd is None:
            return
        unread = os.fstat(self._fd).st_size - os.lseek(self._fd, 0, os.SEEK_CUR)
        if unread > FINISH_BYTES:
            self._output.feed(LOG, b"")
            os.lseek(self._fd, -TAIL_KEEP_BYTES, os.SEEK_END)
            chunk = os.read(self._fd, 1 << 16)
            self._output.skipped(unread - TAIL_KEEP_BYTES)
            self._output.feed(LOG, chunk.split(b"\n", 1)[1] if b"\n" in chunk else b"")  # from a whole line
        while self.pump():
            pass
        self._output.feed(LOG, b"")
        os.close(self._fd)
        self._fd = None
