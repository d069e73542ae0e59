"""The final evaluation's warm-up: taken when done, abandoned (its session closed, its runs ended) when not."""

import threading
import time

import pytest
import tensorflow as tf

from ps_toolkit.training import evaluation

# Every wait below is released by the test itself; the bound only turns a bug into a failure.
BOUND_SECS = 30.0


class _FakeSession:
    """Records its runs; every run after close fails. With ``hold_first_run`` its first run waits until
    the session is closed, then works for ``kernel_secs`` more (a kernel a cancel does not stop), records
    ``"late update"`` and fails as a cancelled run does; with ``release``, it ends only once that is set."""

    def __init__(self, hold_first_run=False, fail_with=None, kernel_secs=0.0, release=None):
        self.runs, self.closed = [], threading.Event()
        self._hold_first_run, self._fail_with = hold_first_run, fail_with
        self._kernel_secs, self._release = kernel_secs, release
        self.holding = threading.Event()

    def run(self, fetches):
        if self.closed.is_set():
            raise tf.errors.CancelledError(None, None, "Session has been closed.")
        if self._fail_with is not None:
            raise self._fail_with
        if self._hold_first_run and not self.runs:
            self.runs.append(fetches)
            self.holding.set()
            assert self.closed.wait(BOUND_SECS), "the held run was never cancelled"
            # The kernel's own work, not a synchronisation: take must wait for it whatever its length.
            time.sleep(self._kernel_secs)
            if self._release is not None:
                assert self._release.wait(BOUND_SECS)
            self.runs.append("late update")
            raise tf.errors.CancelledError(None, None, "Step was cancelled by an explicit call to Session::Close().")
        self.runs.append(fetches)
        if fetches == "cardinality":
            return 1
        return {} if isinstance(fetches, dict) else None

    def close(self):
        self.closed.set()


EVAL_GRAPH = evaluation.EvalGraph(initializer="initializer", updates=["update"], values={}, batches="cardinality")


def _warm(session, new_session=None, reset=True) -> evaluation._WarmSession:
    warm = evaluation._WarmSession()
    warm.start(new_session or (lambda: session), lambda s: s.run("own variables"), EVAL_GRAPH, reset)
    return warm


def test_a_finished_warm_up_hands_over_its_session_with_data_and_metrics_started_again():
    session = _FakeSession()
    warm = _warm(session)
    assert warm.take(BOUND_SECS) is session
    assert warm.initialized
    assert session.runs == ["own variables", "initializer", "cardinality", ["update"], {}, "initializer"]
    assert not session.closed.is_set()


def test_a_warm_up_still_running_is_abandoned_its_session_closed_and_its_run_waited_for():
    """Left running, its run's update or its next run (the reset) would count into, or reset, the
    metrics of the evaluation that replaces it: take returns once its run is over."""
    session = _FakeSession(hold_first_run=True, kernel_secs=0.2)
    warm = _warm(session)
    assert session.holding.wait(BOUND_SECS)
    assert warm.take(1.0) is None
    assert session.closed.is_set()
    assert not warm._thread.is_alive()
    assert session.runs == ["own variables", "late update"], session.runs
    assert not warm.initialized


def test_an_abandoned_warm_up_whose_run_never_ends_is_named_in_a_warning(caplog):
    release = threading.Event()
    session = _FakeSession(hold_first_run=True, release=release)
    warm = _warm(session)
    assert session.holding.wait(BOUND_SECS)
    with caplog.at_level("INFO", logger=evaluation.__name__):
        assert warm.take(0.05) is None
    assert "abandoned warm-up is still in its run" in caplog.text
    release.set()
    warm._thread.join(BOUND_SECS)
    assert not warm._thread.is_alive()


def test_a_warm_up_abandoned_before_its_session_exists_closes_it_unrun():
    session, made = _FakeSession(), threading.Event()
    release = threading.Event()

    def slow_new_session():
        made.set()
        assert release.wait(BOUND_SECS)
        return session

    warm = _warm(session, new_session=slow_new_session)
    assert made.wait(BOUND_SECS)
    assert warm.take(0.01) is None
    release.set()
    warm._thread.join(BOUND_SECS)
    assert session.closed.is_set() and session.runs == []


def test_a_failed_warm_up_gives_no_session_closes_its_own_and_says_why(caplog):
    session = _FakeSession(fail_with=tf.errors.UnavailableError(None, None, "ps 0 is gone"))
    with caplog.at_level("INFO", logger=evaluation.__name__):
        warm = _warm(session)
        assert warm.take(BOUND_SECS) is None
    assert session.closed.wait(BOUND_SECS)
    assert "warm-up failed (the evaluation will run cold): ps 0 is gone" in caplog.text


@pytest.mark.parametrize("reset", [True, False])
def test_a_warm_up_resets_only_when_told(reset):
    session = _FakeSession()
    warm = _warm(session, reset=reset)
    assert warm.take(BOUND_SECS) is session
    assert (session.runs[-1] == "initializer") == reset and warm.initialized == reset


def test_closing_a_real_session_cancels_the_abandoned_warm_up_s_run(caplog):
    """TensorFlow's close of a gRPC session cancels a run blocked in it (here a dequeue from an empty
    queue): the abandoned warm-up's thread ends and take names no run still going."""
    server = tf.compat.v1.train.Server.create_local_server()
    graph = tf.Graph()
    with graph.as_default():
        never_fed = tf.queue.FIFOQueue(1, tf.int32).dequeue()
    warm = evaluation._WarmSession()
    warm.start(
        lambda: tf.compat.v1.Session(server.target, graph=graph),
        lambda session: session.run(never_fed),
        EVAL_GRAPH,
        True,
    )
    with caplog.at_level("INFO", logger=evaluation.__name__):
        assert warm.take(0.5) is None
    assert not warm._thread.is_alive()
    assert "still in its run" not in caplog.text and "warm-up failed" not in caplog.text
