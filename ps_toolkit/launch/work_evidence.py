"""What shows that a task did its job without training: a restored model exported, evaluated or predicted, a result.

A job need not train to succeed: a serving run restores the trained model
and exports a SavedModel, an evaluation job evaluates a checkpoint, a
benchmark trains but reports its progress in its own words
(tf_cnn_benchmarks' ``Step  Img/sec  total_loss`` table and its ``total
images/sec: 335.14``). ``WorkSigns`` reads one task's lines for these:

- restored: TensorFlow's ``Restoring parameters from PATH`` (tf.train.Saver, the estimator);
- exported: ``SavedModel written to: PATH`` (SavedModelBuilder, the estimator's export);
- evaluated: the estimator's ``Finished evaluation at ...``;
- predicted: Estimator.predict yields without a log line of its own;
- each of the three from the compat layer's progress records too (compat/estimator_work.py:
  ``{"work": "exported", "checkpoint": ..., "path": ...}``), as TensorFlow's INFO lines are not
  printed unless the script asks for them;
- a result: a throughput line (``total images/sec: 335.14``) or a row of a ``Step ... loss`` table;
- the user's ``--success_pattern`` (a regular expression), for a script whose words are unknown.

Restoring alone is not work (any worker restores the chief's model), nor is an
export without a restore (an export of an initialised, untrained model).
"""

from __future__ import annotations

import re

from ps_toolkit.base.errors import ConfigError

_RESTORED = re.compile(r"Restoring parameters from (\S+)")
_EXPORTED = re.compile(r"SavedModel written to: ?(\S+)")
_EVALUATED = re.compile(r"Finished evaluation at ")
# "total images/sec: 335.14", "total examples/sec = 1200.5".
_THROUGHPUT = re.compile(r"\btotal [\w ]{0,30}?/sec\s*[:=]\s*\d+(?:\.\d+)?", re.IGNORECASE)
# A table's header, "Step\tImg/sec\ttotal_loss", then rows "10\timages/sec: 33.5 +/- 0.4 (jitter = 1.0)\t7.226".
_TABLE_HEADER = re.compile(r"^\s*step\b\s+\S.*loss\s*$", re.IGNORECASE)
_TABLE_ROW = re.compile(r"^\s*(\d+)\s+\S.*?\s(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*$")


class WorkSigns:
    """Reads one task's lines (``scan``) for the signs above; ``evidence()`` says which it saw, or None.

    Example:
        signs = WorkSigns()
        signs.scan("INFO:tensorflow:Restoring parameters from /m/model.ckpt-1000", None)
        signs.scan("INFO:tensorflow:SavedModel written to: /m/export/1/saved_model.pb", None)
        signs.evidence()   # 'restored /m/model.ckpt-1000 and exported /m/export/1/saved_model.pb'
    """

    def __init__(self, success_pattern: re.Pattern | None = None):
        self._pattern = success_pattern
        self.restored: str | None = None
        self.exported: str | None = None
        self.evaluated = False
        self.predicted = 0
        self.throughput: str | None = None
        self.table_rows = 0  # rows of a Step ... loss table with a step above 0
        self.matched: str | None = None  # the first line --success_pattern matched
        self._in_table = False

    def scan(self, line: str, record: dict | None) -> None:
        """Takes one line of the task's output; ``record`` is its progress record when it is one."""
        if record is not None:
            self._scan_record(record)
            return
        if self._pattern is not None and self.matched is None and self._pattern.search(line):
            self.matched = line.strip()
        restored = _RESTORED.search(line)
        if restored:
            self.restored = restored.group(1).rstrip(".")
        exported = _EXPORTED.search(line)
        if exported:
            self.exported = exported.group(1)
        self.evaluated = self.evaluated or _EVALUATED.search(line) is not None
        throughput = _THROUGHPUT.search(line)
        if throughput:
            self.throughput = throughput.group(0)
        self._scan_table(line)

    def _scan_record(self, record: dict) -> None:
        """The compat layer's record of an export, an evaluation or predictions (compat/estimator_work.py)."""
        work, checkpoint = record.get("work"), record.get("checkpoint")
        if work not in ("exported", "evaluated", "predicted"):
            return
        if isinstance(checkpoint, str) and checkpoint:
            self.restored = checkpoint
        if work == "exported":
            self.exported = str(record.get("path"))
        elif work == "evaluated":
            self.evaluated = True
        count = record.get("count")
        if work == "predicted" and isinstance(count, int) and not isinstance(count, bool) and count > 0:
            self.predicted += count

    def _scan_table(self, line: str) -> None:
        if _TABLE_HEADER.match(line):
            self._in_table = True
            return
        if not self._in_table:
            return
        row = _TABLE_ROW.match(line)
        if row and int(row.group(1)) > 0:
            self.table_rows += 1

    def evidence(self) -> str | None:
        """What the task did, in words, or None when it showed none of the signs."""
        if self.matched is not None:
            return f"a line matching --success_pattern ({_clip(self.matched)!r})"
        done = [
            f"exported {self.exported}" if self.exported else "",
            "evaluated it" if self.evaluated else "",
            f"predicted {self.predicted} examples" if self.predicted else "",
        ]
        done = [text for text in done if text]
        if self.restored and done:
            return f"restored {self.restored} and " + " and ".join(done)
        if self.throughput:
            return f"its throughput line {self.throughput!r}"
        if self.table_rows:
            return f"{self.table_rows} rows of its Step ... loss table"
        return None


def compile_pattern(text: str | None, source: str = "--success_pattern"):
    """``text`` as a compiled regular expression (None for None); ConfigError naming ``source`` when it is not one."""
    if text is None:
        return None
    try:
        return re.compile(text)
    except re.error as err:
        raise ConfigError(f"{source}={text!r} is not a regular expression: {err}") from None


def _clip(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
