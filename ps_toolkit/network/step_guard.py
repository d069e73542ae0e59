"""The chief's hook that refuses an implausible global step (see step_bound.py), ending with exit 2.

It fetches the step the ProgressHook fetches anyway, in the same run (no
extra round trip), and runs before the checkpoint saver's hook: a refused
step is never written into a checkpoint.
"""

from __future__ import annotations

import time

import tensorflow as tf

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.network.step_bound import StepBound


class StepGuardHook(tf.compat.v1.train.SessionRunHook):
    """Raises ConfigError (exit 2) naming the step when a read is beyond what the replicas could do.

    ``step_after_run`` is the global step read after the run (the in-graph
    loop's, when there is one); ``steps_in_run`` how many steps the chief's own
    run took (None: one).
    """

    def __init__(self, bound: StepBound, global_step, step_after_run=None, steps_in_run=None, device: str = "chief"):
        self._bound = bound
        self._global_step = global_step
        self._step_after_run = step_after_run if step_after_run is not None else global_step
        self._steps_in_run = steps_in_run
        self._device = device
        self._started = 0.0

    def after_create_session(self, session, coord):
        self._refuse(self._bound.reset(int(session.run(self._global_step)), time.monotonic()))

    def before_run(self, run_context):
        self._started = time.monotonic()
        fetches = [self._step_after_run] + ([self._steps_in_run] if self._steps_in_run is not None else [])
        return tf.compat.v1.train.SessionRunArgs(fetches)

    def after_run(self, run_context, run_values):
        step, *steps_in_run = run_values.results
        now = time.monotonic()
        own_steps = int(steps_in_run[0]) if steps_in_run else 1
        self._refuse(self._bound.check(int(step), now, own_steps, now - self._started))

    def end(self, session):
        # The stop hook may have ended the loop on the very read that jumped; this runs
        # before the saver's end(), which would write the final checkpoint.
        self.check_now(int(session.run(self._global_step)))

    def saver_listener(self) -> tf.compat.v1.train.CheckpointSaverListener:
        """A listener for the chief's CheckpointSaverHook: a checkpoint of an implausible step is never written.

        The saver reads the step again itself, after this hook's read: a step
        assigned between the two reads is checked here, before the save.
        """
        return _SaveGuard(self)

    def check_now(self, step: int) -> None:
        self._refuse(self._bound.check(step, time.monotonic()))

    def _refuse(self, problem: str | None) -> None:
        if problem:
            raise ConfigError(
                f"{self._device}: {problem}; a tampered or corrupted global step (is something "
                "else writing to the ps?); stopping without saving it"
            )


class _SaveGuard(tf.compat.v1.train.CheckpointSaverListener):
    def __init__(self, guard: StepGuardHook):
        self._guard = guard

    def before_save(self, session, global_step_value):
        self._guard.check_now(int(global_step_value))


def chief_hook(cluster, config, graph) -> StepGuardHook:
    """The guard for a chief training ``graph`` (a train_graph.TrainGraph) as ``config`` says."""
    loop = graph.multi_step
    bound = StepBound(
        num_replicas=cluster.num_replicas, steps_per_run=config.steps_per_run, train_steps=config.last_step
    )
    return StepGuardHook(
        bound,
        graph.global_step,
        step_after_run=loop.global_step if loop else None,
        steps_in_run=loop.steps_done if loop else None,
        device=cluster.device,
    )
