"""Graph-level performance levers: several SGD steps per session.run in an in-graph loop.

On a between-graph cluster of small models each step's cost is mostly fixed
overhead, not arithmetic: a Python ``session.run`` through the MonitoredSession
hooks, the master's RunStep, a RunGraph RPC to every ps partition and the feed.
Running ``steps_per_run`` steps inside one ``tf.while_loop`` pays that overhead
once per run; each iteration still pulls the current parameters from the
parameter servers and pushes its update there, so the algorithm is unchanged
(async SGD, one global-step increment per step).

Example:
    with tf.compat.v1.device(device_fn):
        step = fast_path.apply_step_fn(optimizer, global_step, lambda: loss_and_gradients(iterator.get_next()))
        run = fast_path.multi_step(step, steps_per_run)
    ... session.run([run.loss, run.global_step], {run.num_steps: 10})
"""

from __future__ import annotations

import contextlib
import dataclasses

import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class MultiStep:
    """The tensors of one multi-step run: feed ``num_steps``, fetch ``loss`` and ``global_step``."""

    num_steps: tf.Tensor  # scalar int32 placeholder with a default
    loss: tf.Tensor  # the last iteration's loss
    global_step: tf.Tensor  # the global step after the last iteration's increment
    steps_done: tf.Tensor  # iterations the loop ran (fewer than num_steps when it stops early)


def apply_step_fn(optimizer, global_step, loss_and_gradients):
    """A loop body: applies the gradients ``loss_and_gradients()`` builds, then increments ``global_step``.

    ``loss_and_gradients()`` returns (loss, (gradient, variable) pairs); the
    result is a callable giving (loss, the update op). The model's variables
    must already exist (build it once outside the loop, e.g. for evaluation):
    variables cannot be created inside a while loop.
    """

    def step():
        loss, grads_and_vars = loss_and_gradients()
        apply = optimizer.apply_gradients(grads_and_vars)
        with tf.control_dependencies([apply]):
            # Not read back: that would be one more ps-to-worker transfer per step.
            increment = global_step.assign_add(1, read_value=False)
        return loss, increment

    return step


def multi_step(step_fn, default_steps: int, *, tf1_loop: bool = False) -> MultiStep:
    """Runs ``step_fn`` ``num_steps`` times (default ``default_steps``) in one tf.while_loop.

    ``tf1_loop``: build it with TF1 control flow (``tf1_control_flow``). A
    functional loop's body cannot hold a gradient colocated with a lookup on a
    ps (an embedding table read in place); a TF1 loop can.
    """
    if default_steps < 1:
        raise ValueError(f"steps per run must be at least 1, got {default_steps}")
    num_steps = tf.compat.v1.placeholder_with_default(tf.constant(default_steps, tf.int32), [], name="steps_per_run")

    def body(i, _loss):
        loss, update = step_fn()
        with tf.control_dependencies([update]):
            return i + 1, tf.cast(loss, tf.float32)

    # One iteration at a time: step i+1 must read the parameters step i updated.
    with tf1_control_flow() if tf1_loop else contextlib.nullcontext():
        steps_done, loss = tf.while_loop(
            lambda i, _: i < num_steps,
            body,
            [tf.constant(0), tf.constant(0.0)],
            parallel_iterations=1,
            back_prop=False,
            name="steps_per_run_loop",
        )
    with tf.control_dependencies([loss]):
        new_step = tf.compat.v1.train.get_global_step().read_value()
    return MultiStep(num_steps, loss, new_step, steps_done)


def steps_for_next_run(global_step: int, train_steps: int, num_replicas: int, steps_per_run: int) -> int:
    """Steps to ask for so that the replicas together stop near ``train_steps`` (at least 1).

    Near the end each replica takes its share of what is left, so the last runs
    overshoot ``train_steps`` by at most about ``num_replicas`` steps, as with
    one step per run.
    """
    remaining = train_steps - global_step
    share = -(-remaining // max(num_replicas, 1))
    return max(1, min(steps_per_run, share))


@contextlib.contextmanager
def tf1_control_flow():
    """Builds the loops made inside it with TF1 control flow; TensorFlow's switch is process-wide."""
    was_v2 = tf.compat.v1.control_flow_v2_enabled()
    tf.compat.v1.disable_control_flow_v2()
    try:
        yield
    finally:
        if was_v2:
            tf.compat.v1.enable_control_flow_v2()
