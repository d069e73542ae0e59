"""SyncReplicasOptimizer with a token queue per replica: each replica gives at most one gradient per step.

Design: docs/design.md, "Synchronous training with a token queue per replica".
"""

from __future__ import annotations

import tensorflow as tf

from ps_toolkit.training.multi_step import tf1_control_flow
from ps_toolkit.training.sync_hooks import BEFORE_RESTORE_OPS, release_tokens_op

# A token no update puts: the chief sends it to wake replicas blocked on their queues.
WAKE_TOKEN = -1


class PerReplicaSyncOptimizer(tf.compat.v1.train.SyncReplicasOptimizer):
    """``SyncReplicasOptimizer`` whose tokens are per replica; ``replica_index`` is this replica's (0 is the chief).

    ``last_step``, when given, is the global step training ends at: a replica
    whose session starts after it keeps the release tokens in its queue
    instead of emptying it, so that its one step returns.
    """

    def __init__(
        self, opt, replicas_to_aggregate: int, total_num_replicas: int, replica_index: int, last_step: int | None = None
    ):
        if not 1 <= replicas_to_aggregate <= total_num_replicas:
            raise ValueError(
                f"replicas to aggregate must be between 1 and the {total_num_replicas} replicas, "
                f"got {replicas_to_aggregate}"
            )
        if not 0 <= replica_index < total_num_replicas:
            raise ValueError(f"replica index must be below {total_num_replicas}, got {replica_index}")
        super().__init__(opt, replicas_to_aggregate, total_num_replicas)
        self._replica_index = replica_index
        self._last_step = last_step
        self._accumulators: dict = {}
        self._token_queues: list = []
        self._pushed_queues: list = []

    # What the replica's one-step train op needs, split so that ps_toolkit.training.multi_step
    # can build the aggregation once and push and wait inside a loop body.
    def build_aggregation(self, variables, global_step, sparse_names=frozenset()) -> None:
        """Accumulators for ``variables`` (sparse ones for ``sparse_names``), token queues, the chief's update.

        Builds ``local_step_init_op``, ``chief_init_op``, ``ready_for_local_init_op``
        and the chief's queue runner, as TensorFlow's ``apply_gradients`` does.
        """
        if not variables:
            raise ValueError("sync training needs at least one variable with a gradient")
        if global_step is None:
            raise ValueError("sync training needs a global step to judge stale gradients")
        self._global_step = global_step
        # The local step lives on this replica, not where the device setter puts variables.
        local_anchor = tf.no_op(name="sync_local_anchor")
        with tf.compat.v1.colocate_with(local_anchor):
            self._local_step = _local_variable(0, global_step.dtype.base_dtype, "sync_rep_local_step")
            # True while this replica's gradient for its local step is already in the
            # accumulators (pushed by its previous incarnation or session): its next push is dropped.
            self._skip_push = _local_variable(False, tf.bool, "sync_rep_skip_push")
        aggregated = []
        with tf.name_scope(self._name):
            for var in variables:
                with tf.compat.v1.device(var.device):
                    accumulator, mean = self._accumulator(var, var.name in sparse_names)
                self._accumulators[var.name] = accumulator
                self._accumulator_list.append((accumulator, var.device))
                aggregated.append((mean, var))
        with tf.compat.v1.device(global_step.device), tf.compat.v1.name_scope(""):
            update_op = self._opt.apply_gradients(aggregated, global_step)
            self._token_queues = [self._token_queue(index, global_step) for index in range(self._total_num_replicas)]
            self._pushed_queues = [self._pushed_queue(index, global_step) for index in range(self._total_num_replicas)]
            self._ready_marker = self._pushed_queue("aggregation_ready", global_step)
            self._sync_token_queue = self._own_queue
            with tf.control_dependencies([update_op]):
                step = global_step.read_value()
                top_ups = [self._top_up(queue, step) for queue in self._token_queues]
            self._chief_queue_runner = tf.compat.v1.train.QueueRunner(self._own_queue, [tf.group(*top_ups)])
        self.local_step_init_op = self._local_init(global_step)
        self.ready_for_local_init_op = tf.compat.v1.report_uninitialized_variables(tf.compat.v1.global_variables())
        set_steps = []
        for accumulator, device in self._accumulator_list:
            with tf.compat.v1.device(device):
                set_steps.append(accumulator.set_global_step(global_step, name="SetGlobalStep"))
        with tf.compat.v1.device(global_step.device), tf.control_dependencies(set_steps):
            # Said only once the accumulators judge staleness by the restored step: a
            # replica pushing before would have its gradient dropped against the old one.
            aggregation_ready = _replace_contents(self._ready_marker, global_step.read_value())
        self.chief_init_op = tf.group(self.local_step_init_op, aggregation_ready)
        # No gradient pushed before a restore counts: pushes recorded then are forgotten.
        tf.compat.v1.add_to_collection(BEFORE_RESTORE_OPS, self.forget_pushes_op())
        self._gradients_applied = True

    def _local_init(self, global_step):
        """Empties this replica's queue, adopts the global step, and skips its next push if it is recorded."""
        with tf.compat.v1.device(global_step.device):
            start_step = self._step_after_emptying_own_queue(global_step)
            pending = tf.equal(_peek_last(self._pushed_queues[self._replica_index]), start_step)
        return tf.group(
            tf.compat.v1.assign(self._local_step, start_step), tf.compat.v1.assign(self._skip_push, pending)
        )

    def push_and_take_token(self, grads_and_vars):
        """Pushes the gradients stamped with the local step, waits for this replica's token; returns the new step."""
        return self.push_and_take_token_or_wake(grads_and_vars)[0]

    def push_and_take_token_or_wake(self, grads_and_vars):
        """(new local step, woken): pushes the gradients, records the push, waits for a token this push earned.

        Reads the local step where it is called: inside a loop body, each
        iteration stamps its push with the step its last token gave. A push
        made while ``skip_push`` is set is stamped -1, which every accumulator
        drops as stale: this replica's gradient for that step is already there.
        ``woken`` is true when the token was a wake-up (``WAKE_TOKEN``) from the
        chief, not an update: the caller should return to Python, where a
        failed or re-created session is noticed.
        """
        local = self._local_step.read_value()
        stamp = tf.where(self._skip_push.read_value(), tf.constant(-1, local.dtype), local)
        pushes = []
        for grad, var in grads_and_vars:
            with tf.compat.v1.device(var.device):
                accumulator = self._accumulators[var.name]
                if isinstance(grad, tf.IndexedSlices):
                    pushes.append(accumulator.apply_indexed_slices_grad(grad, local_step=stamp))
                else:
                    pushes.append(accumulator.apply_grad(grad, local_step=stamp))
        with tf.compat.v1.device(self._global_step.device):
            with tf.control_dependencies(pushes):
                recorded = _replace_contents(self._pushed_queues[self._replica_index], local)
            with tf.control_dependencies([recorded]):
                token = self._take_earned_token(local)
            with tf.control_dependencies([token]):
                step = self._global_step.read_value()
        # No update since this push (a wake-up): the gradient is still in the accumulators.
        skip_next = tf.compat.v1.assign(self._skip_push, tf.equal(step, local))
        with tf.control_dependencies([skip_next]):
            return tf.compat.v1.assign(self._local_step, step), token < 0

    def wake_op(self, replicas):
        """Tops up the queues of ``replicas`` (indices) with a wake-up token, unless a token already waits there."""
        with tf.compat.v1.device(self._global_step.device):
            wake = tf.constant(WAKE_TOKEN, self._global_step.dtype.base_dtype)
            return tf.group(*(self._top_up(self._token_queues[index], wake) for index in replicas))

    def training_over_op(self):
        """A bool tensor, true once the global step has reached ``last_step``; None without a last step.

        The chief's aggregation thread reads it before each aggregation: past
        the last step no replica pushes again, so an aggregation started then
        would wait for gradients that never come, and be still in flight when
        the session closes (closing then cancels it and waits for every
        partition's cleanup on the ps tasks: seconds, with a table
        partitioned over several).
        """
        if self._last_step is None:
            return None
        with tf.compat.v1.device(self._global_step.device):
            return self._global_step.read_value() >= self._last_step

    def forget_pushes_op(self):
        """Empties every replica's push record and the chief's aggregation-ready mark: run before a restore."""
        with tf.compat.v1.device(self._global_step.device):
            queues = [*self._pushed_queues, self._ready_marker]
            return tf.group(*(queue.dequeue_many(queue.size()) for queue in queues))

    def aggregation_not_ready_op(self):
        """A 1-D string tensor naming the chief's aggregation until its init has run, else empty.

        For the other replicas' readiness check: after a restore the variables
        are ready before the chief has set its accumulators' step.
        """
        with tf.compat.v1.device(self._global_step.device):
            missing = tf.cast(tf.equal(self._ready_marker.size(), 0), tf.int32)
            return tf.constant(["the chief's sync aggregation (its accumulators' step)"])[:missing]

    @property
    def replica_index(self) -> int:
        return self._replica_index

    @property
    def total_num_replicas(self) -> int:
        return self._total_num_replicas

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """TensorFlow's replica train op, with per-replica tokens; variables without a gradient are left alone."""
        pairs = [(grad, var) for grad, var in grads_and_vars if grad is not None]
        sparse = frozenset(var.name for grad, var in pairs if isinstance(grad, tf.IndexedSlices))
        self.build_aggregation([var for _, var in pairs], global_step, sparse)
        return self.push_and_take_token(pairs)

    def accumulators(self) -> dict:
        """The gradient accumulator of each variable, by variable name."""
        return dict(self._accumulators)

    def get_init_tokens_op(self, num_tokens=-1):
        """No tokens are needed to start: every replica pushes its first gradient before it waits for one."""
        if num_tokens not in (-1, 0):
            raise ValueError(f"per-replica token queues start empty; got {num_tokens} initial tokens")
        return tf.no_op(name="no_initial_sync_tokens")

    def release_op(self, tokens_per_replica: int):
        """Puts ``tokens_per_replica`` tokens in every replica's queue, to free replicas waiting at the end."""
        return release_tokens_op(self._token_queues, self._global_step, tokens_per_replica)

    @staticmethod
    def _token_queue(index: int, global_step):
        """Replica ``index``'s queue, found by name on the ps by every replica's graph and a restarted one's."""
        return tf.queue.FIFOQueue(
            -1,
            global_step.dtype.base_dtype,
            shapes=[()],
            name=f"sync_token_q_{index}",
            shared_name=f"ps_toolkit_sync_token_q_replica_{index}",
        )

    def _step_after_emptying_own_queue(self, global_step):
        """The global step, read after this replica's queue is emptied of its predecessor's tokens."""
        waiting = self._own_queue.size()
        if self._last_step is not None:
            # Once training is over the tokens waiting are release tokens: a replica
            # that starts then takes one and stops, instead of waiting for an update.
            over = global_step.read_value() >= self._last_step
            waiting = tf.where(over, tf.zeros_like(waiting), waiting)
        leftover = self._own_queue.dequeue_many(waiting)
        with tf.control_dependencies([leftover]):
            return global_step.read_value()

    def _take_earned_token(self, local_step):
        """Dequeues from this replica's queue until a token that an update after ``local_step`` put there.

        A token holding a step not above ``local_step`` was put there before
        this replica's push (its previous incarnation's, caught between its
        local init's drain and its global-step read): taking it would let the
        replica push twice for one step. Wake-ups and release tokens (at or
        past ``last_step``) are always taken.
        """
        queue = self._own_queue

        def spare(token):
            earned = tf.logical_or(token < 0, token > local_step)
            if self._last_step is not None:
                earned = tf.logical_or(earned, token >= self._last_step)
            return tf.logical_not(earned)

        with tf1_control_flow():
            return tf.compat.v1.while_loop(
                spare, lambda _: queue.dequeue(), [queue.dequeue()], back_prop=False, name="take_earned_token"
            )

    @staticmethod
    def _pushed_queue(index, global_step):
        """Replica ``index``'s push record: the local step of its last push, kept on the ps across its restarts.

        The same kind of one-value queue, indexed "aggregation_ready", is the chief's mark.
        """
        return tf.queue.FIFOQueue(
            -1,
            global_step.dtype.base_dtype,
            shapes=[()],
            name=f"sync_pushed_step_{index}",
            shared_name=f"ps_toolkit_sync_pushed_step_replica_{index}",
        )

    @property
    def _own_queue(self):
        return self._token_queues[self._replica_index]

    def _accumulator(self, var, sparse: bool):
        """(accumulator, its mean of ``replicas_to_aggregate`` fresh gradients), as TensorFlow builds them."""
        dtype = var.dtype.base_dtype
        shared_name = var.name + "/grad_accum"
        if sparse:
            accumulator = tf.compat.v1.SparseConditionalAccumulator(dtype, shape=(), shared_name=shared_name)
            return accumulator, accumulator.take_indexed_slices_grad(self._replicas_to_aggregate)
        accumulator = tf.compat.v1.ConditionalAccumulator(dtype, shape=var.get_shape(), shared_name=shared_name)
        return accumulator, accumulator.take_grad(self._replicas_to_aggregate)

    @staticmethod
    def _top_up(queue, step):
        """Enqueues a token holding ``step`` unless the queue already holds one; only the chief enqueues."""
        missing = tf.maximum(0, 1 - queue.size())
        return queue.enqueue_many([tf.fill([missing], step)])


def _local_variable(initial, dtype, name: str):
    return tf.compat.v1.Variable(
        initial, trainable=False, collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES], dtype=dtype, name=name
    )


def _peek_last(queue):
    """The largest value in a queue holding at most one (a push record), -2 when empty; the queue is unchanged."""
    values = queue.dequeue_many(queue.size())
    with tf.control_dependencies([queue.enqueue_many([values])]):
        return tf.reduce_max(tf.concat([values, tf.constant([-2], values.dtype)], 0))


def _replace_contents(queue, value):
    """Empties ``queue`` and enqueues ``value``: the queue then holds just ``value``."""
    emptied = queue.dequeue_many(queue.size())
    with tf.control_dependencies([emptied]):
        return queue.enqueue(value)
