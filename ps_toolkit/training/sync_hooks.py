"""Session hooks: progress lines, the stop after an in-graph loop, and the release of sync replicas at the end."""

from __future__ import annotations

import json
import logging
import sys
import threading
import time

import tensorflow as tf

from ps_toolkit.base import tf_internals
from ps_toolkit.base.progress_lines import PROGRESS_PREFIX

# Ops the chief runs when it is about to initialize or restore the model (not when it keeps the
# live state): while the model is not ready, no other replica's session can start meanwhile.
BEFORE_RESTORE_OPS = "ps_toolkit_before_restore_ops"

log = logging.getLogger(__name__)


class ProgressHook(tf.compat.v1.train.SessionRunHook):
    """Records loss and global step each step; prints a progress line every few seconds or global steps.

    The lines (``ps_toolkit progress: {json}``) are what the local launcher
    parses for its status line and charts. Listeners are called with the
    global step after every step (the watchdog listens there).
    """

    def __init__(
        self,
        *,
        loss,
        global_step,
        job: str,
        task: int,
        every_secs: float = 2.0,
        every_global_steps: int | None = None,
        steps_in_run=None,
        step_after_run=None,
    ):
        # A line every ``every_secs``, or sooner once the global step has advanced
        # ``every_global_steps``: a run of a second or two still gets a chart.
        self._every_global_steps = every_global_steps
        # With an in-graph loop a run takes several steps; ``steps_in_run`` says how
        # many, and ``step_after_run`` is the global step read after the loop: a
        # fetch of the variable itself may be read before the loop's first update.
        self._steps_in_run = steps_in_run
        self._step_after_run = step_after_run if step_after_run is not None else global_step
        self._loss = loss
        self._global_step = global_step
        self._job, self._task = job, task
        self._every_secs = every_secs
        self._listeners = []
        self._field_sources = []
        self.local_steps = 0
        self.first_loss = None
        self.last_loss = None
        self.last_global_step = None

    def add_listener(self, listener) -> None:
        self._listeners.append(listener)

    def add_fields(self, source) -> None:
        """``source()`` returns a dict of fields each progress line adds (read when the line is printed)."""
        self._field_sources.append(source)

    def after_create_session(self, session, coord):
        self.last_global_step = int(session.run(self._global_step))
        self._mark = (time.monotonic(), self.last_global_step)

    def before_run(self, run_context):
        fetches = [self._loss, self._step_after_run]
        if self._steps_in_run is not None:
            fetches.append(self._steps_in_run)
        return tf.compat.v1.train.SessionRunArgs(fetches)

    def after_run(self, run_context, run_values):
        loss, step, *steps_in_run = run_values.results
        steps = int(steps_in_run[0]) if steps_in_run else 1
        self.local_steps += steps
        self.last_global_step = int(step)
        # A loop that found training already over ran no step: its loss is the loop's
        # initial value, not a loss; keep the last real one.
        if steps:
            self.last_loss = float(loss)
            if self.first_loss is None:
                self.first_loss = self.last_loss
        for listener in self._listeners:
            listener(self.last_global_step)
        now = time.monotonic()
        advanced = self.last_global_step - self._mark[1]
        if now - self._mark[0] >= self._every_secs or (
            self._every_global_steps and advanced >= self._every_global_steps
        ):
            self.emit(now)

    def end(self, session):
        # before_run fetched the step before each update; read the final one.
        self.last_global_step = int(session.run(self._global_step))

    def emit(self, now=None):
        now = time.monotonic() if now is None else now
        elapsed = max(now - self._mark[0], 1e-9)
        rate = (self.last_global_step - self._mark[1]) / elapsed
        self._mark = (now, self.last_global_step)
        record = {
            "job": self._job,
            "task": self._task,
            "global_step": self.last_global_step,
            "local_step": self.local_steps,
            "loss": self.last_loss,
            "steps_per_sec": round(rate, 2),
            "time": round(time.time(), 3),
        }
        for source in self._field_sources:
            record.update(source())
        print(PROGRESS_PREFIX + json.dumps(record), flush=True)


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
            log.warning("could not release the sync replicas: %s", err.message.splitlines()[0])


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


def release_tokens_op(token_queues, global_step, tokens_per_queue: int):
    """An op that puts ``tokens_per_queue`` tokens holding the global step into each sync token queue.

    Blocked replicas wake on them; the step they carry tells them training is over.
    """
    with tf.compat.v1.device(global_step.device):
        tokens = tf.fill([tokens_per_queue], tf.identity(global_step))
        return tf.group(*(queue.enqueue_many([tokens]) for queue in token_queues))


def print_result(record: dict) -> None:
    """The task's last stdout line: one JSON object."""
    sys.stdout.flush()
    print(json.dumps(record), flush=True)
