"""The chief refuses a global step the replicas could not have reached (a tampered or corrupted step)."""

import re
import types

import pytest
import tensorflow as tf

from ps_toolkit.base.errors import EXIT_CONFIG, ConfigError
from ps_toolkit.network import step_guard
from ps_toolkit.network.step_bound import StepBound
from ps_toolkit.task.roles import trainer
from ps_toolkit.training.config import TrainConfig


def bound(**kwargs) -> StepBound:
    values = dict(num_replicas=3, steps_per_run=20, train_steps=150_000)
    values.update(kwargs)
    return StepBound(**values)


def test_the_attack_value_is_refused_at_the_first_read():
    guard = bound()
    guard.reset(8_139, now=0.0)
    problem = guard.check(10**9, now=0.1, own_steps=20, own_secs=0.1)
    assert problem and "1000000000" in problem and "--train_steps=150000" in problem


def test_a_restored_step_above_the_ceiling_is_refused_at_session_start():
    assert bound().reset(1_000_000_013, now=0.0)
    assert bound().reset(150_000 + 3 * 20, now=0.0) is None  # one run past the end: honest


def test_honest_progress_passes_and_a_jump_within_the_end_is_refused():
    guard = bound()
    guard.reset(0, now=0.0)
    step, now = 0, 0.0
    for _ in range(50):  # every replica 20 steps per 0.1 s run, as the chief measures its own
        step, now = step + 60, now + 0.1
        assert guard.check(step, now, own_steps=20, own_secs=0.1) is None
    # A checkpoint save stalls the chief 5 s while the others step on: still plausible.
    step, now = step + 2 * 200 * 5, now + 5.0
    assert guard.check(step, now, own_steps=20, own_secs=0.1) is None
    # 100,000 steps in 0.1 s cannot be the replicas' doing, although below train_steps.
    problem = guard.check(step + 100_000, now + 0.1, own_steps=20, own_secs=0.1)
    assert problem and f"from {step} to {step + 100_000}" in problem


def test_a_step_that_goes_down_becomes_the_new_baseline():
    guard = bound()
    guard.reset(5_000, now=0.0)
    assert guard.check(5_060, now=0.1, own_steps=20, own_secs=0.1) is None
    assert guard.check(4_000, now=0.2, own_steps=20, own_secs=0.1) is None  # a ps restored an older checkpoint
    assert guard.check(4_060, now=0.3, own_steps=20, own_secs=0.1) is None


def test_while_the_chiefs_runs_warm_up_only_the_ceiling_applies():
    """A (re)started chief's first runs include graph warm-up while the others train at full speed."""
    guard = bound()
    guard.reset(0, now=0.0)
    assert guard.check(100_000, now=30.0) is None
    # Slow first runs, then the others' steps arrive faster than those runs suggest: not a tamper.
    step = 100_000
    for i in range(guard.warm_runs - 1):
        step += 100
        assert guard.check(step, now=30.0 + 0.2 * (i + 1), own_steps=1, own_secs=0.15) is None


def test_the_hook_stops_the_chief_before_the_saver_writes_the_step(tmp_path):
    config = TrainConfig(checkpoint_dir=str(tmp_path), save_checkpoint_steps=10, train_steps=1000)
    cluster = types.SimpleNamespace(num_replicas=1, device="/job:worker/task:0")
    with tf.Graph().as_default():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        train_op = tf.compat.v1.assign_add(global_step, 1)
        tamper = tf.compat.v1.assign(global_step, 10**9)
        scaffold = tf.compat.v1.train.Scaffold()
        graph = types.SimpleNamespace(multi_step=None, global_step=global_step, scaffold=scaffold)
        hooks = [step_guard.chief_hook(cluster, config, graph), *trainer._chief_saving_hooks(config, graph)]
        creator = tf.compat.v1.train.ChiefSessionCreator(scaffold)
        with (
            pytest.raises(ConfigError) as refused,
            tf.compat.v1.train.MonitoredSession(session_creator=creator, hooks=hooks) as session,
        ):
            for _ in range(25):
                session.run(train_op)
            session.run(tamper)
            session.run(train_op)
    assert refused.value.exit_code == EXIT_CONFIG
    # The tamper's own run may fetch the step before or after its assign (one run orders
    # neither), so the guard sees 10**9 at that run or 10**9 + 1 at the next.
    assert re.search(r"the global step is 100000000[01] ", str(refused.value)), refused.value
    assert "/job:worker/task:0" in str(refused.value)
    saved = [name for name in tf.io.gfile.listdir(str(tmp_path)) if name.endswith(".index")]
    assert saved and not any("1000000" in name for name in saved), saved
