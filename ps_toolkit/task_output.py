"""A task's output: its log file, its console lines, and the progress it reports.

Each line a task prints goes to its log file and, prefixed with the task
(``[worker:1] ...``), to the console. Lines that start with the progress prefix
are parsed into records (global step, loss, steps/s) for the status line and
the chart; a worker's last stdout line, a JSON object, is its final result.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Callable

PROGRESS_PREFIX = "ps_toolkit progress: "
TAIL_LINES = 20


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
    """A worker's final JSON line (it has ``final_loss`` or ``local_steps``), or None."""
    if not line or not line.lstrip().startswith("{"):
        return None
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if isinstance(record, dict) and ("final_loss" in record or "local_steps" in record):
        return record
    return None


class TaskOutput:
    """Collects one task's output across its restarts.

    Example:
        out = TaskOutput("worker:1", open(path, "ab"), echo=print)
        out.feed("stdout", b'ps_toolkit progress: {"global_step": 3}\\n')
        out.progress[-1]["global_step"]   # 3
    """

    def __init__(self, name: str, log_file, echo: Callable[[str], None] | None):
        self.name = name
        self._log = log_file
        self._echo = echo
        self._partial = {"stdout": b"", "stderr": b""}
        self.progress: list[dict] = []
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.last_stdout_line: str | None = None

    def note(self, text: str) -> None:
        """A line from the launcher itself (start, restart, stop) into the log."""
        self._write_log(f"--- {text} ---")

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

    def _line(self, stream: str, raw: bytes) -> None:
        line = raw.decode("utf-8", "replace").rstrip("\r")
        self._write_log(line)
        self.tail.append(line)
        if stream == "stdout" and line.strip():
            self.last_stdout_line = line
            record = parse_progress(line)
            if record is not None:
                self.progress.append(record)
        if self._echo is not None:
            self._echo(f"[{self.name}] {line}")

    def _write_log(self, line: str) -> None:
        self._log.write(line.encode("utf-8", "replace") + b"\n")
        self._log.flush()

    @property
    def result(self) -> dict | None:
        return parse_result(self.last_stdout_line)

    @property
    def steps(self) -> int | None:
        """Local steps this task ran: from its final line, else its last progress line."""
        result = self.result
        if result is not None and isinstance(result.get("local_steps"), int):
            return result["local_steps"]
        for record in reversed(self.progress):
            if isinstance(record.get("local_step"), int):
                return record["local_step"]
        return None

    def close(self) -> None:
        for stream in self._partial:
            self.feed(stream, b"")
        self._log.close()
