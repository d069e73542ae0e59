"""TF 1.x session machinery that starts and ends the way the scripts' authors hoped.

- Non-chief replicas poll for a ready model every second, not TF 1.x's 30 s
  (``Supervisor`` and ``SessionManager`` ``recovery_wait_secs``; the
  ``MonitoredTrainingSession`` of a non-chief uses the toolkit's fast creator).
- Stop grace periods are seconds, not 120 s, and a queue-runner thread still
  blocked at stop is logged, not raised: the classic sync chief waited two
  minutes at exit and then died with "Coordinator stopped with threads still
  running".
- When a replica's session ends, a ``SyncReplicasOptimizer`` graph puts spare
  tokens in the sync token queue, so replicas still blocked on it (the chief
  stopped aggregating, or a faster replica took their tokens) finish their
  loops instead of waiting forever.
- Every session of a worker or chief gets device filters: the ps job, the
  task and the tasks its graph pins ops on (see ``task_context``).
"""

from __future__ import annotations

import inspect
import logging
import sys
import weakref

import tensorflow as tf

from ps_toolkit.base.errors import error_summary
from ps_toolkit.task.sessions import FastWorkerSessionCreator
from ps_toolkit.training.sync_hooks import SyncReleaseHook, release_tokens_op
from ps_toolkit_compat import progress_hook, tf_internals
from ps_toolkit_compat.task_context import filled_config

_v1 = tf.compat.v1
log = logging.getLogger(__name__)

READINESS_POLL_SECS = 1.0
STOP_GRACE_SECS = 2.0
# Tokens put in the queue when a replica ends: enough for the others to run
# out their remaining steps (each step takes one).
RELEASE_TOKENS = 1 << 16
_RELEASE_COLLECTION = "ps_toolkit_compat_sync_release"
_RELEASE_TIMEOUT_MS = 5000


class SyncReplicasOptimizer(_v1.train.SyncReplicasOptimizer):
    """``tf.train.SyncReplicasOptimizer`` whose graph can release blocked replicas at the end."""

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        grads_and_vars = table_rows_for_sync(grads_and_vars)
        train_op = super().apply_gradients(grads_and_vars, global_step=global_step, name=name)
        if global_step is not None:  # TF itself raises without one
            # Built now: Supervisor and MonitoredSession finalize the graph before training.
            add_release_op(self, global_step)
        return train_op


def table_rows_for_sync(grads_and_vars) -> list:
    """The pairs as TF's accumulators take them: a dynamic table's rows become one sparse gradient per shard.

    A ``DynamicEmbeddingOptimizer`` gives one (gradient, rows) pair per lookup;
    aggregated as they are, they would reach no accumulator. Merged by id and
    split by shard (``ps_toolkit.dynamic_embedding.sync_gradients``), each
    shard's rows are aggregated once per step by id, as the toolkit's own sync
    path does. Other pairs pass unchanged; pairs already merged pass unchanged.

    Raises:
        NotServedUseError: a table whose ids are not int64 (the sparse accumulators are keyed by int64).
    """
    grads_and_vars = list(grads_and_vars)
    tables = sys.modules.get("ps_toolkit.dynamic_embedding")  # not imported: no table in any graph
    if tables is None or not any(isinstance(variable, tables.TableRows) for _, variable in grads_and_vars):
        return grads_and_vars
    from ps_toolkit.base.errors import ConfigError
    from ps_toolkit_compat.tfra.refused import NotServedUseError

    try:
        return tables.sync_gradients(grads_and_vars)
    except ConfigError as err:
        raise NotServedUseError(f"SyncReplicasOptimizer around a DynamicEmbeddingOptimizer: {err}") from None


def add_release_op(optimizer, global_step=None) -> None:
    """Adds the op that refills ``optimizer``'s sync token queue to the graph's release ops; once per optimizer.

    ``optimizer`` is any ``tf.compat.v1.train.SyncReplicasOptimizer`` whose
    gradients were applied; ``global_step`` defaults to the graph's.
    """
    if getattr(optimizer, "_ps_toolkit_release_added", False):
        return
    queue = tf_internals.sync_token_queue(optimizer)
    if queue is None:
        return  # its gradients were never applied: no queue, nothing blocks on it
    step = global_step if global_step is not None else _v1.train.get_global_step()
    _v1.add_to_collection(_RELEASE_COLLECTION, release_tokens_op([queue], step, RELEASE_TOKENS))
    optimizer._ps_toolkit_release_added = True


def release_ops(graph) -> list:
    return graph.get_collection(_RELEASE_COLLECTION)


def release_sync_replicas(session) -> None:
    """Puts spare tokens in every sync token queue of the session's graph. Bounded; never raises."""
    ops = release_ops(session.graph)
    if not ops or tf_internals.session_closed(session):  # a closed session cannot run anything
        return
    try:
        session.run(ops, options=_v1.RunOptions(timeout_in_ms=_RELEASE_TIMEOUT_MS))
    except (tf.errors.OpError, RuntimeError) as err:
        log.warning("could not release the sync replicas: %s", error_summary(str(err)))


def _release_on_close(session, supervisor):
    """Makes ``session.close()`` (and so ``with session:``) release sync replicas and stop the coordinator first.

    Stopping ``supervisor``'s coordinator before the close is
    ``managed_session``'s order: a queue-runner thread that the close cuts off
    (cancelled mid-step, or starting its next step as the ps drops the
    session: "Session ... is not found") then reports to a coordinator that
    has already stopped, which records nothing, so ``Supervisor.stop()`` does
    not raise the close's own error as the thread's. Only the first close of
    the supervisor's latest session does it: closing an older session again,
    or its garbage collection, must not stop the one training now.
    """
    original_close = session.close

    def close():
        if not tf_internals.session_closed(session):
            release_sync_replicas(session)
            if supervisor.latest_session() is session:
                supervisor.coord.request_stop()
        original_close()

    session.close = close
    return session


class Session(_v1.Session):
    """``tf.Session`` with the task's device filters, releasing sync replicas when closed."""

    def __init__(self, target="", graph=None, config=None):
        graph = graph if graph is not None else _v1.get_default_graph()
        super().__init__(target, graph=graph, config=filled_config(config, graph))

    def close(self):
        release_sync_replicas(self)
        super().close()


def graph_argument(init, args, kwargs):
    """The graph a SessionManager or Supervisor is made for: its ``graph`` argument, else the default graph."""
    try:
        graph = inspect.signature(init).bind(None, *args, **kwargs).arguments.get("graph")
    except TypeError:  # TensorFlow's own __init__ raises it, in its words
        graph = None
    return graph if graph is not None else _v1.get_default_graph()


class SessionManager(_v1.train.SessionManager):
    """``tf.train.SessionManager`` polling every second, with the task's device filters."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("recovery_wait_secs", READINESS_POLL_SECS)
        self._ps_toolkit_graph = graph_argument(_v1.train.SessionManager.__init__, args, kwargs)
        super().__init__(*args, **kwargs)

    def prepare_session(self, master, *args, config=None, **kwargs):
        return super().prepare_session(master, *args, config=filled_config(config, self._ps_toolkit_graph), **kwargs)

    def recover_session(self, master, *args, config=None, **kwargs):
        return super().recover_session(master, *args, config=filled_config(config, self._ps_toolkit_graph), **kwargs)

    def wait_for_session(self, master, config=None, max_wait_secs=float("Inf")):
        config = filled_config(config, self._ps_toolkit_graph)
        return super().wait_for_session(master, config=config, max_wait_secs=max_wait_secs)


class Supervisor(_v1.train.Supervisor):
    """``tf.train.Supervisor`` that polls every second and stops in seconds.

    Sessions it makes get the task's device filters and release blocked sync
    replicas when closed.
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("recovery_wait_secs", READINESS_POLL_SECS)
        kwargs.setdefault("stop_grace_secs", STOP_GRACE_SECS)
        self._closed_threads_grace_secs = kwargs["stop_grace_secs"]
        self._latest_session = None  # a weak reference: a session the script dropped is not kept alive
        self._ps_toolkit_graph = graph_argument(_v1.train.Supervisor.__init__, args, kwargs)
        super().__init__(*args, **kwargs)

    def prepare_or_wait_for_session(self, master="", config=None, *args, **kwargs):
        self._join_threads_of_closed_sessions()
        config = filled_config(config, self._ps_toolkit_graph)
        session = super().prepare_or_wait_for_session(master, config, *args, **kwargs)
        self._latest_session = weakref.ref(session)
        return _release_on_close(session, self)

    def _join_threads_of_closed_sessions(self) -> None:
        """Waits, at most ``stop_grace_secs``, for the threads of the session closed before the next is made.

        ``prepare_or_wait_for_session`` clears the coordinator. A queue runner
        of the closed session still winding down would report its cut-off into
        the cleared coordinator and stop the new session before its first
        step. What those threads report is dropped, as TF 1.x's clear_stop
        drops it, and logged. A session still open (the coordinator not
        stopped) keeps its threads running, as in TF 1.x.
        """
        if not self.coord.should_stop():
            return
        try:
            self.coord.join(stop_grace_period_secs=self._closed_threads_grace_secs, ignore_live_threads=True)
        except Exception as err:  # noqa: BLE001 -- whatever a closed session's thread reported is not this session's
            log.info("a thread of the closed session ended with: %s", str(err).splitlines()[0] if str(err) else err)

    def latest_session(self):
        """The session this supervisor made last, while it exists; else None."""
        return self._latest_session() if self._latest_session is not None else None

    def stop(self, threads=None, close_summary_writer=True, ignore_live_threads=True):
        # A sync chief's aggregating queue runner is blocked on gradients that
        # will never come: TF 1.x raised here after 120 s. It is logged instead,
        # and the CancelledError it got when a session closed is no failure
        # (sessions made here stop the coordinator first; a plain tf.Session
        # given to start_queue_runners does not).
        try:
            super().stop(threads, close_summary_writer, ignore_live_threads)
        except tf.errors.CancelledError as err:
            log.info("a queue runner was cancelled when its session closed: %s", err.message.splitlines()[0])


# TensorFlow's own: legacy_tf.install() puts the function below in its place for tf.compat.v1 scripts.
_TF_MONITORED_TRAINING_SESSION = _v1.train.MonitoredTrainingSession
_MTS_SIGNATURE = inspect.signature(_TF_MONITORED_TRAINING_SESSION)


def MonitoredTrainingSession(*args, **kwargs):  # noqa: N802 -- TF 1.x's name
    """``tf.train.MonitoredTrainingSession`` with short stop grace, fast non-chief polling and filters."""
    arguments = _MTS_SIGNATURE.bind(*args, **kwargs).arguments
    graph = _v1.get_default_graph()
    arguments["config"] = filled_config(arguments.get("config"), graph)
    arguments.setdefault("stop_grace_period_secs", STOP_GRACE_SECS)
    releases = release_ops(graph)
    if releases:
        arguments["hooks"] = [*(arguments.get("hooks") or []), SyncReleaseHook(releases)]
    if progress_hook.wanted():
        arguments["hooks"] = [*(arguments.get("hooks") or []), progress_hook.ProgressHook()]
    if arguments.get("is_chief", True):
        return _TF_MONITORED_TRAINING_SESSION(**arguments)
    # TF's non-chief path, with a creator that polls every second instead of 30 s.
    creator = FastWorkerSessionCreator(
        arguments.get("scaffold") or _v1.train.Scaffold(),
        arguments.get("master", ""),
        arguments["config"],
        readiness_poll_secs=READINESS_POLL_SECS,
        max_wait_secs=arguments.get("max_wait_secs", 7200),
        session_manager_class=SessionManager,  # tf.train.SessionManager as the script sees it, as TF's creator
    )
    return _v1.train.MonitoredSession(
        session_creator=creator,
        hooks=arguments.get("hooks") or [],
        stop_grace_period_secs=arguments["stop_grace_period_secs"],
    )
