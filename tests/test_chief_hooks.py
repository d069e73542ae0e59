"""The chief's saving hooks: what they cost per step, not only what they save."""

import types

import tensorflow as tf

from ps_toolkit.task.roles import trainer
from ps_toolkit.training.config import TrainConfig


def _count_global_step_reads(tmp_path, steps: int, steps_per_run: int) -> tuple[int, list[str]]:
    """Runs ``steps`` increments under the chief's saving hooks; returns the extra global-step reads and the saves."""
    config = TrainConfig(checkpoint_dir=str(tmp_path), save_checkpoint_steps=100, steps_per_run=steps_per_run)
    reads = []
    with tf.Graph().as_default():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        train_op = tf.compat.v1.assign_add(global_step, steps_per_run)
        scaffold = tf.compat.v1.train.Scaffold()
        hooks = trainer._chief_saving_hooks(config, types.SimpleNamespace(scaffold=scaffold, multi_step=None))

        class CountingCreator(tf.compat.v1.train.ChiefSessionCreator):
            def create_session(self):
                session = super().create_session()
                real_run = session.run

                def run(fetches, *args, **kwargs):
                    # A hook's own read: one tensor fetched on its own, outside a training run.
                    if isinstance(fetches, tf.Tensor) and "global_step" in fetches.name:
                        reads.append(fetches.name)
                    return real_run(fetches, *args, **kwargs)

                session.run = run
                return session

        with tf.compat.v1.train.MonitoredSession(session_creator=CountingCreator(scaffold), hooks=hooks) as session:
            for _ in range(steps // steps_per_run):
                session.run(train_op)
    saves = sorted(name for name in tf.io.gfile.listdir(str(tmp_path)) if name.endswith(".index"))
    return len(reads), saves


def test_checkpoint_hook_reads_the_global_step_only_when_a_save_may_be_due(tmp_path):
    # TF's hook, left as it is, reads the global step after every run: 312 reads here.
    reads, saves = _count_global_step_reads(tmp_path, steps=300, steps_per_run=1)
    assert reads <= 30, f"{reads} extra global-step reads for 300 steps"
    assert saves == [f"model.ckpt-{step}.index" for step in (0, 100, 200, 300)]


def test_checkpoint_hook_still_saves_on_time_with_several_steps_per_run(tmp_path):
    reads, saves = _count_global_step_reads(tmp_path, steps=300, steps_per_run=20)
    # Fewer reads than runs (TF's hook, left as it is: 23 reads for these 15 runs).
    assert reads < 15, f"{reads} extra global-step reads for 15 runs"
    # Saves land on the first run boundary at or past each multiple of 100.
    assert saves == [f"model.ckpt-{step}.index" for step in (0, 100, 200, 300)]
