"""Several training steps per session.run, in one in-graph loop: async SGD steps or sync replica steps.

Design: docs/design.md, "One replica's step".
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

    def step():
        loss, update = step_fn()
        return loss, update, tf.constant(False)

    return _steps_loop(step, default_steps, tf1_loop=tf1_loop, name="steps_per_run_loop")


def sync_multi_step(
    sync_optimizer,
    global_step,
    variables,
    loss_and_gradients,
    steps_per_run: int,
    last_step: int,
    sparse_names=frozenset(),
) -> MultiStep:
    """Up to ``num_steps`` sync steps in one run, stopping early once ``global_step`` reaches ``last_step``.

    ``sync_optimizer`` is a ``sync_replicas.PerReplicaSyncOptimizer``;
    ``loss_and_gradients()`` returns (loss, (gradient, variable) pairs) for
    ``variables``; it is called inside the loop, once. Builds the optimizer's
    aggregation (its chief queue runner, token queues and init ops) as a side
    effect, as ``sync_optimizer.apply_gradients`` would.
    """
    if steps_per_run < 1:
        raise ValueError(f"steps per run must be at least 1, got {steps_per_run}")
    sparse_names = frozenset(sparse_names)
    # Built once, outside the loop: the chief's queue runner takes from these accumulators.
    sync_optimizer.build_aggregation(variables, global_step, sparse_names)
    accumulators = sync_optimizer.accumulators()

    def step():
        loss, grads_and_vars = loss_and_gradients()
        _check_every_variable_has_a_gradient(grads_and_vars, accumulators, sparse_names)
        new_local_step, woken = sync_optimizer.push_and_take_token_or_wake(grads_and_vars)
        return loss, new_local_step, woken

    def before_last_step():
        with tf.compat.v1.device(global_step.device):
            return global_step.read_value() < last_step

    # TF1 control flow: the accumulators' handles are reference tensors, which a
    # TF2 (functional) loop cannot carry; a TF1 loop enters them as RefEnter.
    return _steps_loop(
        step,
        steps_per_run,
        tf1_loop=True,
        name="sync_steps_per_run_loop",
        keep_going=before_last_step,
        global_step=global_step,
    )


def _steps_loop(step_fn, default_steps: int, *, tf1_loop: bool, name: str, keep_going=None, global_step=None):
    """The loop both kinds share: ``step_fn()`` gives (loss, the op the step ends with, stop now?).

    The loop runs until ``num_steps`` iterations are done, a step says stop,
    or ``keep_going()`` (read before each iteration) is false.
    """
    if default_steps < 1:
        raise ValueError(f"steps per run must be at least 1, got {default_steps}")
    num_steps = tf.compat.v1.placeholder_with_default(tf.constant(default_steps, tf.int32), [], name="steps_per_run")

    def body(i, _loss, _stop):
        loss, done, stop = step_fn()
        with tf.control_dependencies([done]):
            return i + 1, tf.cast(loss, tf.float32), tf.identity(stop)

    def condition(i, _loss, stop):
        going = tf.logical_and(i < num_steps, tf.logical_not(stop))
        return going if keep_going is None else tf.logical_and(going, keep_going())

    # One iteration at a time: step i+1 must read the parameters step i updated.
    with tf1_control_flow() if tf1_loop else contextlib.nullcontext():
        steps_done, loss, _ = tf.compat.v1.while_loop(
            condition,
            body,
            [tf.constant(0), tf.constant(0.0), tf.constant(False)],
            parallel_iterations=1,
            back_prop=False,
            name=name,
        )
    with tf.control_dependencies([loss]):
        new_step = (global_step if global_step is not None else tf.compat.v1.train.get_global_step()).read_value()
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


def _check_every_variable_has_a_gradient(grads_and_vars, accumulators: dict, sparse_names: frozenset) -> None:
    """The chief's queue runner takes a gradient from EVERY accumulator: one never fed would block it forever.

    Each gradient must also be of the kind its accumulator was built for
    before the body: IndexedSlices for ``sparse_names``, dense for the rest.
    """
    wrong_kind = sorted(
        var.name
        for grad, var in grads_and_vars
        if grad is not None and isinstance(grad, tf.IndexedSlices) != (var.name in sparse_names)
    )
    if wrong_kind:
        raise ValueError(
            f"sync training in a loop: the gradient of {', '.join(wrong_kind)} is not of the kind "
            "(sparse or dense) declared when the loop was built"
        )
    fed = {var.name for grad, var in grads_and_vars if grad is not None}
    starved = sorted(set(accumulators) - fed)
    if starved:
        raise ValueError(f"sync training needs a gradient for every variable passed; none for {', '.join(starved)}")


class StopAtLastStepHook(tf.compat.v1.train.SessionRunHook):
    """Stops once the global step read after a run's in-graph loop reaches ``last_step``.

    TensorFlow's StopAtStepHook judges by the step read as the run starts, so
    with 20 steps per run it asks for one run too many (which finds training
    over and takes no step, or overshoots the last step).
    """

    def __init__(self, step_after_run, last_step: int):
        self._step_after_run = step_after_run
        self._last_step = last_step

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(self._step_after_run)

    def after_run(self, run_context, run_values):
        if run_values.results >= self._last_step:
            run_context.request_stop()
