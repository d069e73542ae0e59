"""A non-chief's session creator waits for the chief: checks soon after each other first, then longer waits, bounded."""

import pytest
import tensorflow as tf

from ps_toolkit.task.sessions import FastWorkerSessionCreator


class _RecordingCreator(FastWorkerSessionCreator):
    """Records the wait of every session manager asked for, and calls ``on_wait`` with it."""

    def __init__(self, *args, on_wait=lambda wait: None, **kwargs):
        super().__init__(*args, **kwargs)
        self.waits = []
        self._on_wait = on_wait

    def _session_manager(self, recovery_wait_secs=None):
        wait = self._readiness_poll_secs if recovery_wait_secs is None else recovery_wait_secs
        self.waits.append(wait)
        self._on_wait(wait)
        return super()._session_manager(recovery_wait_secs)


def _model(name: str):
    graph = tf.Graph()
    with graph.as_default():
        with tf.compat.v1.device("/job:ps/task:0"):
            variable = tf.compat.v1.get_variable(name, initializer=7, use_resource=False)
        scaffold = tf.compat.v1.train.Scaffold()
    return graph, variable, scaffold


def test_a_worker_started_before_the_chief_initializes_takes_the_model_at_its_next_check(in_process_cluster):
    graph, variable, scaffold = _model("readiness_next_check")
    chief, worker = in_process_cluster.targets["worker"]

    def initialize_when_the_first_waits_are_over(wait):
        # The 0.05 s waits found nothing ready; the chief initializes before the next check.
        if wait == 0.1:
            with tf.compat.v1.Session(chief, graph=graph) as session:
                session.run(variable.initializer)

    with graph.as_default():
        creator = _RecordingCreator(
            scaffold, worker, None, readiness_poll_secs=0.2, on_wait=initialize_when_the_first_waits_are_over
        )
        session = creator.create_session()
        try:
            assert session.run(variable) == 7
        finally:
            session.close()
    assert creator.waits == [0.05, 0.1], creator.waits


def test_a_model_never_initialized_ends_the_wait_at_its_bound(in_process_cluster):
    graph, _, scaffold = _model("readiness_never")
    with graph.as_default():
        creator = _RecordingCreator(
            scaffold, in_process_cluster.targets["worker"][1], None, readiness_poll_secs=0.2, max_wait_secs=0.6
        )
        with pytest.raises(tf.errors.DeadlineExceededError):
            creator.create_session()
    assert creator.waits == [0.05, 0.1, 0.2], creator.waits
