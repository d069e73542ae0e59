"""The chief's sync aggregation thread: a queue runner that wakes the chief's step on error, and a quiet shutdown."""

from __future__ import annotations

import logging
import threading

import tensorflow as tf

from ps_toolkit.base import tf_internals

log = logging.getLogger(__name__)


class WakingQueueRunner(tf_internals.queue_runner_base()):
    """A queue runner that, when its op fails, runs ``wake_op`` after reporting the error to the coordinator,
    and that stops once ``training_over`` (a bool tensor, read before each run) is true.

    The chief's aggregation runs in this thread while the chief's own step
    waits for its token: without a wake-up the error reported here is never
    seen, because the main thread never returns to check the coordinator.
    Without the stop, the thread starts one more aggregation after the last
    step, which waits for gradients no replica will push and is still in
    flight when the session closes ("Coordinator stopped with threads still
    running"; closing then cancels it across the ps tasks, which took 7-18 s
    with an embedding table partitioned over two).
    """

    def __init__(self, wake_op, training_over=None, **kwargs):
        super().__init__(**kwargs)
        self._wake_op = wake_op
        self._training_over = training_over

    def run_thread(self, sess, enqueue_op, coord=None):
        if coord is None:
            super().run_thread(sess, enqueue_op, coord)
            return
        over = None if self._training_over is None else sess.make_callable(self._training_over)
        super().run_thread(sess, enqueue_op, _WakeOnError(coord, lambda: self._wake(sess), over))

    def _wake(self, sess) -> None:
        try:
            sess.run(self._wake_op, options=tf.compat.v1.RunOptions(timeout_in_ms=5000))
            log.info("the sync aggregation stopped on an error: woke the chief's step")
        except Exception as err:  # the session may be closing; the error itself is already reported
            log.warning("could not wake the chief's sync step: %s", str(err).splitlines()[0])


class _WakeOnError:
    """A coordinator seen through a queue runner: an error it reports is followed by a wake-up, and it
    says stop once ``training_over()`` (when given) is true."""

    def __init__(self, coord, wake, training_over=None):
        self._coord = coord
        self._wake = wake
        self._training_over = training_over

    def should_stop(self) -> bool:
        # An error reading the step propagates as the queue runner's own (reported, then a wake-up).
        return self._coord.should_stop() or bool(self._training_over and self._training_over())

    def request_stop(self, ex=None) -> None:
        self._coord.request_stop(ex)
        self._wake()


def quiet_cancelled_queue_runners() -> None:
    """Silences the one expected traceback of a sync chief's shutdown.

    The chief's aggregating queue-runner thread is blocked on the gradient
    accumulators when training ends; closing the session cancels it, and
    TensorFlow's Coordinator re-raises that CancelledError in the thread,
    which Python prints as an alarming "Exception in thread" traceback at
    the end of a successful run. Every other thread error still prints.
    """
    previous = threading.excepthook

    def hook(args):
        in_queue_runner = args.thread is not None and args.thread.name.startswith("QueueRunnerThread-")
        if in_queue_runner and issubclass(args.exc_type, tf.errors.CancelledError):
            log.debug("queue runner %s cancelled at shutdown", args.thread.name)
            return
        previous(args)

    if getattr(previous, "_ps_toolkit", False):
        return
    hook._ps_toolkit = True
    threading.excepthook = hook
