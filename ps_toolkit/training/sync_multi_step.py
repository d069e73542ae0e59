"""Several synchronous steps per session.run: SyncReplicasOptimizer's replica side inside an in-graph loop.

A sync step is a chain of waits (push gradients, wait for the aggregated
update's token, pull the new parameters); with one step per ``session.run``
every link also pays a Python run through the hooks, the master's RunStep and
a RunGraph RPC to each ps. Here each iteration of a ``tf.while_loop`` does
what the replica train op does (push each gradient into its accumulator
stamped with the replica's local step, take a token, adopt the global step
as the new local step), so that overhead is paid once per run.

The aggregation is ``replica_tokens.PerReplicaSyncOptimizer``'s (TensorFlow's
accumulators and chief update, a token queue per replica), built once,
outside the loop. So staleness checks, backup replicas
(``replicas_to_aggregate`` < replicas) and the chief's init ops are unchanged.
The accumulators are built before the body, so the caller says which
variables get sparse gradients (``sparse_names``: an embedding table's
IndexedSlices, aggregated as a mean per row); a gradient of the other kind,
or a variable without one, is refused when the loop is built.

A wake-up token from the chief (``replica_tokens.WAKE_TOKEN``: its session
was re-created, or its aggregation failed) ends the loop, so that the run
returns to Python, where MonitoredSession notices a failed session.

Why it cannot hang at the end: the loop also stops as soon as the global step
reaches the last step, read on every iteration, so no replica asks for a
token past the end of training; a replica already waiting for one is freed by
the release tokens (``hooks.SyncReleaseHook``) of the first replica to end.

Example (inside the replica's device scope, the model's variables already created):
    sync = PerReplicaSyncOptimizer(optimizer, replicas_to_aggregate=2, total_num_replicas=2, replica_index=0)
    run = sync_loop.multi_step(sync, global_step, variables, loss_and_gradients, steps_per_run=10, last_step=1000)
    ... session.run(run.global_step.op, {run.num_steps: 10})
"""

from __future__ import annotations

import tensorflow as tf

from ps_toolkit.training.multi_step import MultiStep, tf1_control_flow


def multi_step(
    sync_optimizer,
    global_step,
    variables,
    loss_and_gradients,
    steps_per_run: int,
    last_step: int,
    sparse_names=frozenset(),
):
    """Up to ``num_steps`` sync steps in one run, stopping early once ``global_step`` reaches ``last_step``.

    ``sync_optimizer`` is a ``replica_tokens.PerReplicaSyncOptimizer``;
    ``loss_and_gradients()`` returns (loss, (gradient, variable) pairs) for
    ``variables``; it is called inside the loop, once. Builds the optimizer's
    aggregation (its chief queue runner, token queues and init ops) as a side
    effect, as ``sync_optimizer.apply_gradients`` would.
    """
    if steps_per_run < 1:
        raise ValueError(f"steps per run must be at least 1, got {steps_per_run}")
    # Built once, outside the loop: the chief's queue runner takes from these accumulators.
    sync_optimizer.build_aggregation(variables, global_step, frozenset(sparse_names))
    accumulators = sync_optimizer.accumulators()
    num_steps = tf.compat.v1.placeholder_with_default(tf.constant(steps_per_run, tf.int32), [], name="steps_per_run")

    def body(i, _loss, _woken):
        loss, grads_and_vars = loss_and_gradients()
        _check_every_variable_has_a_gradient(grads_and_vars, accumulators, frozenset(sparse_names))
        new_local_step, woken = sync_optimizer.push_and_take_token_or_wake(grads_and_vars)
        with tf.control_dependencies([new_local_step]):
            return i + 1, tf.cast(loss, tf.float32), tf.identity(woken)

    def keep_going(i, _loss, woken):
        with tf.compat.v1.device(global_step.device):
            not_done = global_step.read_value() < last_step
        return tf.logical_and(tf.logical_and(i < num_steps, not_done), tf.logical_not(woken))

    # TF1 control flow: the accumulators' handles are reference tensors, which a
    # TF2 (functional) loop cannot carry; a TF1 loop enters them as RefEnter.
    with tf1_control_flow():
        steps_done, loss, _ = tf.compat.v1.while_loop(
            keep_going,
            body,
            [tf.constant(0), tf.constant(0.0), tf.constant(False)],
            parallel_iterations=1,
            back_prop=False,
            name="sync_steps_per_run_loop",
        )
    with tf.control_dependencies([loss]):
        new_step = global_step.read_value()
    return MultiStep(num_steps, loss, new_step, steps_done)


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
