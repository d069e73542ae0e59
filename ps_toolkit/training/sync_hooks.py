"""Session hooks of sync training: the sync replicas' start and recovery, and the release of the replicas at the end."""

from __future__ import annotations

import logging

import tensorflow as tf

from ps_toolkit.base.errors import error_summary
from ps_toolkit.training.queue_runners import WakingQueueRunner

# Ops the chief runs when it is about to initialize or restore the model (not when it keeps the
# live state): while the model is not ready, no other replica's session can start meanwhile.
BEFORE_RESTORE_OPS = "ps_toolkit_before_restore_ops"

log = logging.getLogger(__name__)


class SyncReleaseHook(tf.compat.v1.train.SessionRunHook):
    """At the end of sync training, frees the replicas still blocked on the token queue.

    Without it, once the chief stops aggregating, every other replica waits
    forever for a sync token ("sync training hangs at the end"). Every replica
    runs it as it ends. The tokens carry the final global step,
    so the released replicas see that training is over and stop too.
    """

    def __init__(self, release_op):
        self._release_op = release_op

    def end(self, session):
        try:
            session.run(self._release_op, options=tf.compat.v1.RunOptions(timeout_in_ms=5000))
        except tf.errors.OpError as err:
            log.warning("could not release the sync replicas: %s", error_summary(err.message))


class SyncReplicasHook(tf.compat.v1.train.SessionRunHook):
    """What ``SyncReplicasOptimizer.make_session_run_hook`` does, minus its recovery bugs.

    TensorFlow's hook starts the chief's aggregating queue runner with the
    default close ops, so whenever the chief's session ends (a ps restart, a
    network blip: MonitoredSession then re-creates it) the SHARED token queue
    on the ps is closed for good, and the re-created session dies on "FIFOQueue
    'sync_token_q' is closed". This hook's queue runner never closes the queue,
    and treats the cancellation of its blocked step at session close as a
    normal end, not an error.

    Recovery when a ps other than the token queues' restarts: nothing fails
    for a replica blocked on its token queue, so the chief wakes them. When its
    queue runner fails it puts a wake-up token in the chief's own queue (the
    chief's step returns, and MonitoredSession re-creates the session for the
    queue runner's error); on every (re-)created session it puts one in every
    other replica's queue, as TensorFlow's chief refills its shared queue (their
    next step fails on the restarted ps, or, when nothing was lost, re-waits
    without pushing twice).
    """

    def __init__(self, optimizer, is_chief: bool, num_tokens: int = -1):
        self._optimizer = optimizer
        self._is_chief = is_chief
        self._num_tokens = num_tokens

    @property
    def optimizer(self):
        return self._optimizer

    def begin(self):
        optimizer = self._optimizer
        self._ready_for_local_init_op = optimizer.ready_for_local_init_op
        self._queue_runner = self._init_tokens_op = None
        if self._is_chief:
            self._local_init_op = optimizer.chief_init_op
            stock = optimizer.get_chief_queue_runner()
            chief = optimizer.replica_index
            self._wake_others_op = optimizer.wake_op([i for i in range(optimizer.total_num_replicas) if i != chief])
            self._queue_runner = WakingQueueRunner(
                optimizer.wake_op([chief]),
                training_over=optimizer.training_over_op(),
                queue=stock.queue,
                enqueue_ops=stock.enqueue_ops,
                close_op=tf.no_op(name="keep_sync_token_queue_open"),
                cancel_op=tf.no_op(name="keep_sync_token_queue_open_on_cancel"),
                queue_closed_exception_types=(tf.errors.OutOfRangeError, tf.errors.CancelledError),
            )
            self._init_tokens_op = optimizer.get_init_tokens_op(self._num_tokens)
        else:
            self._local_init_op = optimizer.local_step_init_op

    def after_create_session(self, session, coord):
        not_ready = session.run(self._ready_for_local_init_op)
        if len(not_ready):
            names = ", ".join(v.decode() if isinstance(v, bytes) else str(v) for v in not_ready[:5])
            raise RuntimeError(f"model not ready for the sync replicas' local init: {names}")
        session.run(self._local_init_op)
        if self._init_tokens_op is not None:
            session.run(self._init_tokens_op)
        if self._queue_runner is not None:
            session.run(self._wake_others_op)
            self._queue_runner.create_threads(session, coord=coord, daemon=True, start=True)


def release_tokens_op(token_queues, global_step, tokens_per_queue: int):
    """An op that puts ``tokens_per_queue`` tokens holding the global step into each sync token queue.

    Blocked replicas wake on them; the step they carry tells them training is over.
    """
    with tf.compat.v1.device(global_step.device):
        tokens = tf.fill([tokens_per_queue], tf.identity(global_step))
        return tf.group(*(queue.enqueue_many([tokens]) for queue in token_queues))
