"""The chief's periodic saves: by steps every N global steps, whatever the chief's own pace and loop length;
and its delta checkpoints (``delta_hook``).

TensorFlow's CheckpointSaverHook judges by the global step read as a run
starts plus the run's own steps: with the in-graph loop, a chief slower than
its peers sees few global steps (21 of 220 in one async run of 2 workers)
and saved only at the start and the end. Here the save check reads the step
after the run's loop, and the chief's next run is cut short so that it ends
near the next save, judged by the global steps each of its own steps took so
far.
"""

from __future__ import annotations

import math

import tensorflow as tf

from ps_toolkit import dynamic_embedding
from ps_toolkit.base.tf_internals import set_saver_steps_per_run


class StepAfterRunSaverHook(tf.compat.v1.train.CheckpointSaverHook):
    """A CheckpointSaverHook whose check uses the global step read after each run's in-graph loop.

    Args:
        step_after_run: The global step read after the loop (``MultiStep.global_step``).
        *args, **kwargs: CheckpointSaverHook's.
    """

    def __init__(self, step_after_run, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._step_after_run = step_after_run
        # The step fetched is already the run's last: the check adds none of the run's own steps.
        set_saver_steps_per_run(self, 0)

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(self._step_after_run)


class SavePacer(tf.compat.v1.train.CheckpointSaverListener):
    """Cuts the chief's async runs short so that a save by steps is at most about one run late.

    Args:
        every_steps: ``--save_checkpoint_steps``.
    """

    def __init__(self, every_steps: int):
        self._every_steps = every_steps
        self._last_saved = None
        self._seen = None  # (global step, the chief's own steps) before its previous run
        self._global_per_own = self._last_pace = 1.0

    def after_save(self, session, global_step_value):
        self._last_saved = int(global_step_value)

    def steps_for_next_run(self, global_step: int, own_steps: int, wanted: int) -> int:
        """At most ``wanted`` steps (at least 1): about as many as the global steps to the next save take."""
        measured = self._seen is not None
        if measured and own_steps > self._seen[1]:
            took = (global_step - self._seen[0]) / (own_steps - self._seen[1])
            # The larger of the last two runs' paces: a pace misjudged low makes a run cross the save point.
            self._global_per_own, self._last_pace = max(1.0, took, self._last_pace), max(1.0, took)
        self._seen = (global_step, own_steps)
        if self._last_saved is None:
            return wanted
        if not measured:  # one step first, to see the pace: the session's start-up is in the run before
            return 1
        to_next_save = self._last_saved + self._every_steps - global_step
        return max(1, min(wanted, math.ceil(to_next_save / self._global_per_own)))


def delta_hook(cluster, config, saver, step_after_run=None):
    """The chief's delta checkpoints of the dynamic tables (--delta_checkpoint_secs/steps), or None.

    Args:
        cluster: The ClusterConfig.
        config: The TrainConfig.
        saver: The chief's scaffold saver (a ``dynamic_embedding.DeltaMergingSaver``).
        step_after_run: The global step read after each run's in-graph loop (``MultiStep.global_step``).
    """
    if not config.deltas:
        return None
    # An async worker's step may read the global step before a whole save and write its rows after:
    # the rows of the last runs of every replica before the whole checkpoint go into each delta too.
    margin = 0 if config.sync_replicas else config.steps_per_run * cluster.num_replicas
    return dynamic_embedding.DeltaCheckpointHook(
        saver,
        config.checkpoint_dir,
        every_secs=config.delta_checkpoint_secs,
        every_steps=config.delta_checkpoint_steps,
        last_step=config.last_step if config.train_steps else 0,
        margin_steps=margin,
        step_after_run=step_after_run,
    )
