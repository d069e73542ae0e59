"""The chief's table maintenance: eviction on a schedule, and each table's size, admissions and evictions.

``TableMaintenanceHook`` runs, when its session starts, every ``every_steps``
global steps and at the end, the tables' eviction ops (``eviction``) in a session.run of its own,
after a step, never inside one; then reads each table's rows and counters.
It writes them as summaries beside the chief's (``tables/<name>/rows``, ...),
keeps the latest for the progress line (``progress_fields``) and a short
history for the task's JSON result (``result``).
"""

from __future__ import annotations

import logging

import tensorflow as tf

from ps_toolkit.dynamic_embedding import eviction
from ps_toolkit.dynamic_embedding.table import STAT_ADMITTED, STAT_EVICTED, DynamicTable

log = logging.getLogger(__name__)
HISTORY_LENGTH = 12  # entries kept per table in the result: every other one is dropped when full


class TableMaintenanceHook(tf.compat.v1.train.SessionRunHook):
    """Evicts and measures ``tables`` every ``every_steps`` global steps (chief only).

    Args:
        tables: the DynamicTables of the training graph.
        every_steps: global steps between two maintenance runs (>= 1).
        summary_dir: where the summaries go (the chief's checkpoint dir); None: none written.
    """

    def __init__(self, tables: list[DynamicTable], every_steps: int, summary_dir: str | None = None):
        self._tables, self._every_steps, self._summary_dir = list(tables), max(1, every_steps), summary_dir
        self._next_step = None
        self.latest: dict = {}
        self.history: dict = {table.name: [] for table in self._tables}

    def begin(self):
        """Builds the eviction op and the measures of every table."""
        self._global_step = tf.compat.v1.train.get_global_step()
        evicting = [table for table in self._tables if eviction.evicts(table)]
        with tf.name_scope("table_maintenance"):
            self._evict = tf.group(*[eviction.eviction_op(t, self._global_step) for t in evicting])
            self._measures = {
                table.name: {
                    "rows": table.size(),
                    "rows_per_shard": table.shard_sizes(),
                    "admitted": table.stat(STAT_ADMITTED),
                    "evicted": table.stat(STAT_EVICTED),
                }
                for table in self._tables
            }

    def after_create_session(self, session, coord):
        """Measures the tables as the session finds them (a restored run: their restored size)."""
        step = int(session.run(self._global_step))
        self._next_step = step + self._every_steps
        self.maintain(session, step)  # where the tables start from (a restored run: their restored size)

    def before_run(self, run_context):
        """Asks for the global step with each run."""
        return tf.compat.v1.train.SessionRunArgs(self._global_step)

    def after_run(self, run_context, run_values):
        """Maintains the tables once ``every_steps`` global steps have passed."""
        step = int(run_values.results)
        if step >= self._next_step:
            self._next_step = step + self._every_steps
            self.maintain(run_context.session, step)

    def end(self, session):
        """Maintains the tables once more at the last step."""
        self.maintain(session, int(session.run(self._global_step)))

    def maintain(self, session, step: int) -> None:
        """Evicts, then measures every table at ``step``; records and writes the measures.

        Args:
            session: The chief's session.
            step: The global step the measures are recorded at.
        """
        before = session.run({name: measure["rows"] for name, measure in self._measures.items()})
        session.run(self._evict)
        measures = session.run(self._measures)
        for name, values in measures.items():
            record = {
                "global_step": step,
                "rows_before_eviction": int(before[name]),
                "rows": int(values["rows"]),
                "rows_per_shard": [int(v) for v in values["rows_per_shard"]],
                "admitted": int(values["admitted"]),
                "evicted": int(values["evicted"]),
            }
            self.latest[name] = record
            _append_thinned(self.history[name], record)
        self._write_summaries(step)

    def progress_fields(self) -> dict:
        """For the progress line: rows per table, as of the last maintenance."""
        return {"table_rows": {name: record["rows"] for name, record in self.latest.items()}} if self.latest else {}

    def result(self) -> dict:
        """For the JSON result: each table's last measures and their history."""
        return {
            name: {**{k: v for k, v in self.latest.get(name, {}).items()}, "history": self.history[name]}
            for name in self.history
        }

    def _write_summaries(self, step: int) -> None:
        if not self._summary_dir:
            return
        values = []
        for name, record in self.latest.items():
            for field in ("rows", "admitted", "evicted"):
                values.append(tf.compat.v1.Summary.Value(tag=f"tables/{name}/{field}", simple_value=record[field]))
        writer = tf.compat.v1.summary.FileWriterCache.get(self._summary_dir)
        writer.add_summary(tf.compat.v1.Summary(value=values), step)


def _append_thinned(history: list, record: dict) -> None:
    """Appends ``record``; past HISTORY_LENGTH entries every other older one goes (the first and last stay)."""
    history.append({k: record[k] for k in ("global_step", "rows_before_eviction", "rows", "admitted", "evicted")})
    if len(history) > HISTORY_LENGTH:
        del history[1:-1:2]
