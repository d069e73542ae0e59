"""The chief's table maintenance: eviction on a schedule, and each table's size, admissions and evictions.

``TableMaintenanceHook`` runs, when its session starts, every ``every_steps``
global steps and at the end, the tables' eviction ops (``eviction``) in a session.run of its own,
after a step, never inside one; that same run reads each table's rows before and after, and its
counters. At the end it runs only when no maintenance ran at the last global step already.
It writes them as summaries beside the chief's (``tables/<name>/rows``, ...),
keeps the latest for the progress line (``progress_fields``) and a short
history for the task's JSON result (``result``).

A table without ``max_rows_per_shard`` is bounded by default (``row_bounds``):
the hook reads each ps's memory (``ps_memory``) until every ps has said it,
states each table's bound once in the log, feeds the bounds to the eviction at
each run and warns, once per share, when a shard nears its default bound.
"""

from __future__ import annotations

import logging

import tensorflow as tf

from ps_toolkit.dynamic_embedding import eviction, ps_memory, row_bounds, shard_records
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
        self._maintained_step = None  # the global step of the last maintenance run
        self.runs = 0  # maintenance runs so far: eviction and measures, one session.run each
        self.latest: dict = {}
        self.history: dict = {table.name: [] for table in self._tables}
        self.bounds: dict = {}  # table name -> row_bounds.Bound, once computed
        self._stated: dict = {}  # table name -> the start-up line said for its bound
        self._warnings = row_bounds.Warnings()

    def begin(self):
        """Builds the eviction op and the measures of every table."""
        self._global_step = tf.compat.v1.train.get_global_step()
        groups = {id(table.group): table.group for table in self._tables}.values()
        evicting = [group for group in groups if any(eviction.evicts(t) for t in group.tables)]
        with tf.name_scope("table_maintenance"):
            self._bound_inputs = {shard: eviction.bound_input(shard) for group in evicting for shard in group.shards}
            devices = {device for table in self._tables for device in table.devices}
            self._memory = {device: ps_memory.read(device) for device in devices if ps_memory.publishes(device)}
            local = [device for device in devices if not ps_memory.publishes(device)]
            self._local_memory = dict.fromkeys(local, ps_memory.memory_of_this_host()) if local else {}
            # One session.run does it all, in order: the sizes before, the eviction, the measures after.
            before = _rows_per_shard(self._tables)
            with tf.control_dependencies(_flat(before)):
                evict = tf.group(
                    *[eviction.eviction_op(group, self._global_step, self._bound_inputs) for group in evicting]
                )
            with tf.control_dependencies([evict]):
                after = _rows_per_shard(self._tables)
                measures = {
                    table.name: {
                        "rows_before_eviction": tf.add_n(before[table.name]),
                        "rows_per_shard_before_eviction": before[table.name],
                        "rows": tf.add_n(after[table.name]),
                        "rows_per_shard": after[table.name],
                        "admitted": table.stat(STAT_ADMITTED),
                        "evicted": table.stat(STAT_EVICTED),
                    }
                    for table in self._tables
                }
            self._maintenance = {"global_step": tf.identity(self._global_step), "tables": measures}

    def after_create_session(self, session, coord):
        """Measures the tables as the session finds them (a restored run: their restored size)."""
        self.bounds = {}  # a new session may be on a restarted ps: its memory is read again
        step = self.maintain(session)
        self._next_step = step + self._every_steps

    def before_run(self, run_context):
        """Asks for the global step with each run."""
        return tf.compat.v1.train.SessionRunArgs(self._global_step)

    def after_run(self, run_context, run_values):
        """Maintains the tables once ``every_steps`` global steps have passed."""
        step = int(run_values.results)
        if step >= self._next_step:
            self._next_step = step + self._every_steps
            self.maintain(run_context.session)

    def end(self, session):
        """Maintains the tables once more at the last step, unless that step's maintenance already ran."""
        if self._maintained_step is not None and int(session.run(self._global_step)) == self._maintained_step:
            return
        self.maintain(session)

    def maintain(self, session) -> int:
        """Evicts, then measures every table, in one session.run; records and writes the measures.

        Args:
            session: The chief's session.

        Returns:
            The global step the measures are recorded at.
        """
        self._update_bounds(session)
        done = session.run(self._maintenance, feed_dict=self._bound_feed())
        step = self._maintained_step = int(done["global_step"])
        self.runs += 1
        for table in self._tables:
            values, bound = done["tables"][table.name], self.bounds[table.name]
            for line in self._warnings.lines(table, bound, [int(v) for v in values["rows_per_shard_before_eviction"]]):
                log.warning("%s", line)
            rows_per_shard = [int(v) for v in values["rows_per_shard"]]
            record = {
                "global_step": step,
                "rows_before_eviction": int(values["rows_before_eviction"]),
                "rows": int(values["rows"]),
                "rows_per_shard": rows_per_shard,
                "bytes_per_shard": [rows * row_bounds.bytes_a_row(table) for rows in rows_per_shard],
                "max_rows_per_shard": list(bound.rows),
                "bound": bound.source,
                "admitted": int(values["admitted"]),
                "evicted": int(values["evicted"]),
            }
            self.latest[table.name] = record
            _append_thinned(self.history[table.name], record)
        self._write_summaries(step)
        return step

    def _update_bounds(self, session) -> None:
        """Computes the tables' bounds while a ps's memory is not known; states each bound once it is."""
        if self.bounds and all(None not in b.rows for b in self.bounds.values() if b.source == "default"):
            return
        published = session.run(self._memory) if self._memory else {}
        memory = {**self._local_memory, **{device: int(m) for device, m in published.items()}}
        self.bounds = row_bounds.bounds(self._tables, memory)
        for table in self._tables:
            line = row_bounds.statement(table, self.bounds[table.name])
            if self._stated.get(table.name) != line:
                self._stated[table.name] = line
                log.info("%s", line)

    def _bound_feed(self) -> dict:
        """Each evicting shard's bounds, for its ``eviction.bound_input``."""
        feed = {}
        for shard, bound_input in self._bound_inputs.items():
            limits = []
            for table in shard.group.tables:
                bound = self.bounds.get(table.name)
                rows = bound.rows[shard.index] if bound else table.max_rows_per_shard
                limits.append(rows or eviction.NO_LIMIT)
            feed[bound_input] = limits + [eviction.NO_LIMIT]
        return feed

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


def _rows_per_shard(tables) -> dict:
    """Table name -> its number of rows on each shard: one scan of each group shard's rows for all its tables."""
    counts = {}
    for table in tables:
        for shard in table.shards:
            if shard not in counts:
                counts[shard] = shard_records.row_counts(shard)
    return {table.name: [counts[shard][table.group.tables.index(table)] for shard in table.shards] for table in tables}


def _flat(per_table: dict) -> list:
    return [count for counts in per_table.values() for count in counts]
