"""SyncReplicasOptimizer with a token queue per replica: each replica gives at most one gradient per step.

TensorFlow's ``SyncReplicasOptimizer`` puts every replica's token in ONE
queue on the ps, and any replica takes any token; its docstring says so:
"some workers can consume multiple minibatches, while some may not consume
even one". So in a 2-of-2 job whose second worker died, the survivor takes
both tokens of every step and pushes twice: it trains alone, on its own
gradients counted as two replicas', and nothing says so. (CI found exactly
that with the in-graph sync loop: global step 6,109 after 12,180 local steps.)

Here each replica has a queue of its own (on the global step's ps, shared by
name, so a restarted replica finds it again):

- after each aggregated update, the chief's queue runner tops every queue up
  to ONE token, never more: a replica that is behind or dead holds at most
  one, so no queue grows;
- a replica pushes its gradients, takes a token from its own queue, and adopts
  the global step read then as its local step (a token that waited in the
  queue is old; a gradient stamped with an old step would be dropped as stale,
  and with no token left the replica would wait for an update that needs it);
- a replica's local init empties its queue, so that a restarted replica does
  not inherit the token its previous incarnation left (unless training is
  over: then the tokens waiting are release tokens, and a late replica takes
  one and stops).

So with ``replicas_to_aggregate`` equal to the number of replicas, every step
averages one gradient from each, and a dead replica stops the job (the
watchdog then ends it, retryably) instead of silently halving it. With backup
replicas (fewer to aggregate than there are) the fastest make each step; a
replica that was behind can, in a narrow race, give two gradients to one step,
as every replica can in TensorFlow's design. More replicas to aggregate than
there are (several gradients per replica per step) is refused.

Accumulators, staleness checks, the chief's update and its init ops are
TensorFlow's own, built as ``SyncReplicasOptimizer.apply_gradients`` builds
them; ``ps_toolkit.training.hooks.SyncReplicasHook`` drives it like TensorFlow's class.
"""

from __future__ import annotations

import tensorflow as tf

from ps_toolkit.training.hooks import release_tokens_op


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

    # What the replica's one-step train op needs, split so that ps_toolkit.training.sync_multi_step
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
            self._local_step = tf.compat.v1.Variable(
                0,
                trainable=False,
                collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES],
                dtype=global_step.dtype.base_dtype,
                name="sync_rep_local_step",
            )
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
            self._sync_token_queue = self._own_queue
            with tf.control_dependencies([update_op]):
                step = global_step.read_value()
                top_ups = [self._top_up(queue, step) for queue in self._token_queues]
            self._chief_queue_runner = tf.compat.v1.train.QueueRunner(self._own_queue, [tf.group(*top_ups)])
            start_step = self._step_after_emptying_own_queue(global_step)
        self.local_step_init_op = tf.compat.v1.assign(self._local_step, start_step)
        self.ready_for_local_init_op = tf.compat.v1.report_uninitialized_variables(tf.compat.v1.global_variables())
        set_steps = []
        for accumulator, device in self._accumulator_list:
            with tf.compat.v1.device(device):
                set_steps.append(accumulator.set_global_step(global_step, name="SetGlobalStep"))
        self.chief_init_op = tf.group(self.local_step_init_op, *set_steps)
        self._gradients_applied = True

    def push_and_take_token(self, grads_and_vars):
        """Pushes the gradients stamped with the local step, waits for this replica's token; returns the new step.

        Reads the local step where it is called: inside a loop body, each
        iteration stamps its push with the step its last token gave.
        """
        stamp = self._local_step.read_value()
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
                token = self._own_queue.dequeue()
            with tf.control_dependencies([token]):
                step = self._global_step.read_value()
        return tf.compat.v1.assign(self._local_step, step)

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
