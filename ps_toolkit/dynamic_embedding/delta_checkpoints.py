"""Delta checkpoints: written by the chief between whole checkpoints, merged into every restore of ps_toolkit's.

A delta holds the graph's dense variables whole (they are small beside the tables, and a
restore must give one consistent step) and, per table, the entries changed since its base
whole checkpoint plus the ids kept from it (``delta_saving``): cumulative, so a restore reads
the whole checkpoint and the newest delta, never a chain. Each ps writes its own shards' part
(a sharded Saver, as for the whole checkpoints).

- ``DeltaSaver``: the ops that write and restore a delta in a graph.
- ``DeltaMergingSaver``: a ``tf.compat.v1.train.Saver`` whose ``restore`` of a whole checkpoint
  also merges the newest delta built on it (the chief's scaffold, the evaluator, the export).
- ``DeltaCheckpointHook``: the chief's delta saves, every ``every_secs`` and/or ``every_steps``,
  against the whole checkpoint the chief's saver wrote last.
"""

from __future__ import annotations

import logging
import os
import time

import tensorflow as tf

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.dynamic_embedding import delta_files, layout
from ps_toolkit.dynamic_embedding.delta_saving import DeltaShardSaveable
from ps_toolkit.dynamic_embedding.saving import GroupShardSaveable

log = logging.getLogger(__name__)


class DeltaSaver:
    """The default graph's delta ops: its global variables and other saveables whole, each group shard's changes.

    Build it once the model (its tables and their optimizer slots) is built.
    """

    def __init__(self):
        groups = layout.groups_of_graph()
        with tf.name_scope("delta_checkpoint"), tf.control_dependencies(None):
            self.base_step = tf.compat.v1.placeholder_with_default(tf.constant(-1, tf.int64), [], name="base_step")
        shards = [DeltaShardSaveable(shard, self.base_step) for group in groups for shard in group.shards]
        others = [
            saveable
            for saveable in tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.SAVEABLE_OBJECTS)
            if not isinstance(saveable, GroupShardSaveable)
        ]
        self._saver = tf.compat.v1.train.Saver(
            var_list=[*tf.compat.v1.global_variables(), *others, *shards],
            sharded=True,
            allow_empty=True,
            name="delta_saver",
        )

    def save(self, session, prefix: str, base_step: int) -> None:
        """Writes the delta of the entries last seen at ``base_step`` or later to checkpoint ``prefix``."""
        saver_def = self._saver.saver_def
        session.run(saver_def.save_tensor_name, {saver_def.filename_tensor_name: prefix, self.base_step: base_step})

    def restore(self, session, prefix: str, base_step: int) -> None:
        """Merges delta ``prefix`` (written against ``base_step``) into the restored whole checkpoint it builds on."""
        saver_def = self._saver.saver_def
        session.run(saver_def.restore_op_name, {saver_def.filename_tensor_name: prefix, self.base_step: base_step})


class DeltaMergingSaver(tf.compat.v1.train.Saver):
    """A ``tf.compat.v1.train.Saver`` (same arguments) whose restore merges the newest delta of the checkpoint.

    In a graph without dynamic tables, or with ``deltas=False`` (a graph that never restores), it is the
    plain Saver. Build it after the model.
    """

    def __init__(self, *args, deltas: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.delta = DeltaSaver() if deltas and layout.groups_of_graph() else None

    def restore(self, sess, save_path):
        """Restores whole checkpoint ``save_path``, then the newest delta built on it (if any)."""
        super().restore(sess, save_path)
        found = delta_files.delta_for(save_path) if self.delta is not None and save_path else None
        if found is None:
            return
        prefix, state = found
        try:
            self.delta.restore(sess, prefix, state.base_step)
        except tf.errors.OpError as err:  # a damaged delta: its merge may have begun, so the whole again
            first = (err.message or str(err)).strip().splitlines()[0][:200]
            log.warning(
                "delta checkpoint %s could not be merged (%s: %s); restoring %s alone",
                state.delta,
                type(err).__name__,
                first,
                state.base,
            )
            super().restore(sess, save_path)
            return
        log.info("restored delta checkpoint %s (global step %d) over %s", state.delta, state.global_step, state.base)


class DeltaCheckpointHook(tf.compat.v1.train.SessionRunHook):
    """The chief's delta checkpoints against the whole checkpoint its saver wrote last.

    Args:
        saver: The chief's scaffold saver (a DeltaMergingSaver of a graph with tables).
        checkpoint_dir: The chief's checkpoint folder.
        every_secs, every_steps: The deltas' interval (either or both; a delta when either is due).
        last_step: The job's last global step (0: none): no delta there, the final whole checkpoint follows.
        margin_steps: Entries last seen up to this many steps before the whole checkpoint's step go into the
            delta too: an async worker's step that read the global step before the whole save and wrote after
            it carries an older step (0 for sync training, whose chief writes every step itself).
        step_after_run: The global step as read after a run's in-graph loop, which the interval is judged
            by (default: the graph's global step, read as the run starts: a loop's steps late).
    """

    def __init__(
        self,
        saver,
        checkpoint_dir: str,
        every_secs=None,
        every_steps=None,
        last_step: int = 0,
        margin_steps: int = 0,
        step_after_run=None,
    ):
        if getattr(saver, "delta", None) is None:
            raise ConfigError(
                "--delta_checkpoint_secs/--delta_checkpoint_steps need a model with dynamic tables "
                "(ps_toolkit.dynamic_embedding): a delta of a model without them is its whole checkpoint"
            )
        self._delta, self._checkpoint_dir = saver.delta, checkpoint_dir
        self._every_secs, self._every_steps, self._margin = every_secs, every_steps, margin_steps
        self._last_step, self._step_after_run = last_step, step_after_run
        self._base = None  # (prefix, global step) of the last whole checkpoint
        self._last = None  # (monotonic time, global step) of the last delta or whole checkpoint
        self.latest: dict | None = None  # the last delta written: prefix, global_step, bytes, seconds
        self.count = 0  # deltas written

    def begin(self):
        """Reads the global step with the deltas."""
        self._global_step = tf.compat.v1.train.get_global_step()
        if self._step_after_run is None:
            self._step_after_run = self._global_step

    def base_listener(self) -> tf.compat.v1.train.CheckpointSaverListener:
        """The listener to give the chief's CheckpointSaverHook: each whole checkpoint becomes the base."""
        hook = self

        class _Base(tf.compat.v1.train.CheckpointSaverListener):
            def after_save(self, session, global_step_value):
                hook.whole_checkpoint_saved(int(global_step_value))

        return _Base()

    def whole_checkpoint_saved(self, global_step: int) -> None:
        """Makes the newest whole checkpoint (saved at ``global_step``) the base of the deltas that follow."""
        prefix = tf.train.latest_checkpoint(self._checkpoint_dir)
        if prefix is not None:
            self._base = (prefix, global_step)
            self._last = (time.monotonic(), global_step)

    def before_run(self, run_context):
        """Asks for the global step with each run (the progress hook fetches it too: no extra round trip)."""
        return tf.compat.v1.train.SessionRunArgs(self._step_after_run)

    def after_run(self, run_context, run_values):
        """Writes a delta once its interval has passed since the last delta or whole checkpoint."""
        step = int(run_values.results)
        if self._base is None or run_context.stop_requested or (self._last_step and step >= self._last_step):
            return
        since, since_step = self._last
        due = self._every_secs is not None and time.monotonic() - since >= self._every_secs
        if due or (self._every_steps and step - since_step >= self._every_steps):
            self.write(run_context.session)

    def write(self, session) -> dict | None:
        """Writes the delta of the current global step; None when no step passed since the base or last delta."""
        base_prefix, base_step = self._base
        step = int(session.run(self._global_step))
        self._last = (time.monotonic(), step)
        if step <= base_step or (self.latest and self.latest["global_step"] == step):
            return None
        prefix = delta_files.delta_prefix(base_prefix, step)
        started = time.monotonic()
        filter_step = max(0, base_step - self._margin)
        self._delta.save(session, prefix, filter_step)
        state = delta_files.DeltaState(os.path.basename(base_prefix), filter_step, os.path.basename(prefix), step)
        delta_files.write_state(self._checkpoint_dir, state)
        delta_files.remove_deltas_except(self._checkpoint_dir, prefix)
        record = {
            "prefix": prefix,
            "global_step": step,
            "bytes": delta_files.checkpoint_bytes(prefix),
            "seconds": round(time.monotonic() - started, 3),
        }
        self.latest, self.count = record, self.count + 1
        log.info(
            "delta checkpoint %s: %d bytes in %.2f s (rows changed since step %d)",
            os.path.basename(prefix),
            record["bytes"],
            record["seconds"],
            filter_step,
        )
        return record
