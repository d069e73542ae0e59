"""Session creators: a chief that keeps live ps state, a worker that polls readiness quickly.

TensorFlow's ChiefSessionCreator restores the last checkpoint every time the
chief (re)creates its session, even when the parameter servers are healthy
and hold newer values: a chief restart silently rolls training back. Its
WorkerSessionCreator polls for the model every 30 s, so a worker recovers
from a ps restart half a minute late. These creators fix both.
"""

from __future__ import annotations

import logging
import time

import tensorflow as tf

from ps_toolkit.training.sync_hooks import BEFORE_RESTORE_OPS

log = logging.getLogger(__name__)
_SessionManager = tf.compat.v1.train.SessionManager


class _ScaffoldedCreator(tf.compat.v1.train.SessionCreator):
    """Shared set-up: a scaffold, a master, a config and a session manager."""

    def __init__(self, scaffold, master: str, config, readiness_poll_secs: float, session_manager_class=None):
        self._scaffold = scaffold
        self._master = master
        self._config = config
        self._readiness_poll_secs = readiness_poll_secs
        # The compat layer passes the SessionManager an old script sees as tf.train.SessionManager.
        self._session_manager_class = session_manager_class or _SessionManager
        self._managers: dict[float, _SessionManager] = {}

    def _session_manager(self, recovery_wait_secs: float | None = None):
        """The session manager that waits ``recovery_wait_secs`` (default ``readiness_poll_secs``) between checks."""
        wait = self._readiness_poll_secs if recovery_wait_secs is None else recovery_wait_secs
        if wait not in self._managers:
            self._managers[wait] = self._session_manager_class(
                local_init_op=self._scaffold.local_init_op,
                local_init_feed_dict=self._scaffold.local_init_feed_dict,
                ready_op=self._scaffold.ready_op,
                ready_for_local_init_op=self._scaffold.ready_for_local_init_op,
                graph=tf.compat.v1.get_default_graph(),
                recovery_wait_secs=wait,
            )
        return self._managers[wait]


class LiveStateChiefSessionCreator(_ScaffoldedCreator):
    """Initializes or restores the model, but keeps it when the ps still hold it.

    If every global variable is already initialized on the parameter servers
    (the chief restarted, or its session was re-created after a network blip),
    the live values are newer than any checkpoint and are kept. If any ps lost
    its variables (it restarted), everything is restored from the newest
    checkpoint, or initialized when there is none.
    """

    def __init__(self, scaffold, master, config, checkpoint_dir, readiness_poll_secs=1.0):
        super().__init__(scaffold, master, config, readiness_poll_secs)
        self._checkpoint_dir = checkpoint_dir
        self.kept_live_state = False

    def create_session(self):
        self._scaffold.finalize()
        session = self._session_with_live_state()
        if session is not None:
            self.kept_live_state = True
            return session
        self.kept_live_state = False
        return self._session_manager().prepare_session(
            self._master,
            saver=self._scaffold.saver,
            checkpoint_dir=self._checkpoint_dir,
            config=self._config,
            init_op=self._scaffold.init_op,
            init_feed_dict=self._scaffold.init_feed_dict,
            init_fn=self._scaffold.init_fn,
        )

    def _session_with_live_state(self):
        session = tf.compat.v1.Session(self._master, graph=tf.compat.v1.get_default_graph(), config=self._config)
        try:
            # Global variables only: local ones (a sync replica's local step)
            # are per session and never survive a re-creation.
            uninitialized = session.run(self._scaffold.ready_for_local_init_op)
            if len(uninitialized) == 0:
                self._run_local_init(session)
                step = tf.compat.v1.train.global_step(session, tf.compat.v1.train.get_global_step())
                log.info("parameter servers still hold the model at global step %d: kept, not restored", step)
                return session
            before_restore = tf.compat.v1.get_collection(BEFORE_RESTORE_OPS)
            if before_restore:
                session.run(before_restore)
        except Exception:
            session.close()
            raise
        session.close()
        return None

    def _run_local_init(self, session):
        if self._scaffold.local_init_op is not None:
            session.run(self._scaffold.local_init_op, feed_dict=self._scaffold.local_init_feed_dict)


class FastWorkerSessionCreator(_ScaffoldedCreator):
    """A non-chief creator that checks for a ready model at once, then after waits that double
    from ``FIRST_POLL_SECS`` up to ``readiness_poll_secs``.

    Started together with the chief, a worker usually finds the model ready a
    fraction of a second later: short first waits let it start training then,
    and the longer later ones keep a large cluster waiting for a slow chief
    (or a restore) from asking the ps tasks many times a second.
    """

    FIRST_POLL_SECS = 0.05

    def __init__(
        self, scaffold, master, config, readiness_poll_secs=1.0, max_wait_secs=30 * 60, session_manager_class=None
    ):
        super().__init__(scaffold, master, config, readiness_poll_secs, session_manager_class)
        self._max_wait_secs = max_wait_secs

    def create_session(self):
        self._scaffold.finalize()
        deadline = time.monotonic() + self._max_wait_secs
        poll = min(self.FIRST_POLL_SECS, self._readiness_poll_secs)
        while poll < self._readiness_poll_secs:
            # Two checks a wait apart; DeadlineExceeded means the model was not ready for either.
            try:
                return self._session_manager(poll).wait_for_session(
                    self._master, config=self._config, max_wait_secs=2 * poll
                )
            except tf.errors.DeadlineExceededError:
                pass
            time.sleep(poll)
            poll *= 2
        return self._session_manager().wait_for_session(
            self._master, config=self._config, max_wait_secs=max(0.0, deadline - time.monotonic())
        )
