"""The compat Supervisor's sessions: closing one cuts off its queue runners without an error to report."""

import gc
import time

import pytest

tf = pytest.importorskip("tensorflow")
from ps_toolkit_compat.supervision import Supervisor  # noqa: E402 -- after TensorFlow's import check

_v1 = tf.compat.v1
CLOSES = 12


def _queue_runners_on_the_ps(shared_name: str) -> tuple[list, Supervisor]:
    """([(a queue's size, a QueueRunner enqueueing into it on the ps)] one per round, a Supervisor), in the
    default graph. A queue per round: when a coordinator stops, each of its queue runners closes its queue
    (TensorFlow's ``_close_on_stop``), and a queue shared on the ps stays closed for the sessions after."""
    rounds = []
    for round_index in range(CLOSES):
        with _v1.device("/job:ps/task:0"):
            queue = _v1.FIFOQueue(1 << 22, tf.int32, shared_name=f"{shared_name}_{round_index}")
            size = queue.size()
        rounds.append((size, _v1.train.QueueRunner(queue, [queue.enqueue(1)])))
    supervisor = Supervisor(logdir=None, init_op=_v1.global_variables_initializer(), summary_op=None, saver=None)
    return rounds, supervisor


def test_queue_runners_cut_off_by_the_session_close_report_nothing(in_process_cluster):
    # A queue runner stepping on the ps when its session closes gets the close's own error
    # (cancelled mid-step, or "Session ... is not found" as it starts the next step). Reported
    # to a coordinator still running, sv.stop() raises it as the thread's failure: a sync
    # chief's script then ends with status 1 after training to the end.
    with tf.Graph().as_default():
        rounds, supervisor = _queue_runners_on_the_ps("compat_supervision_close_race")
        for size, runner in rounds:
            with supervisor.prepare_or_wait_for_session(in_process_cluster.targets["worker"][0]) as session:
                threads = supervisor.start_queue_runners(session, [runner])
                options = _v1.RunOptions(timeout_in_ms=10_000)  # each run bounded; the loop by its deadline
                before = session.run(size, options=options)
                deadline = time.monotonic() + 30
                while session.run(size, options=options) < before + 100:  # the runner enqueues thousands a second
                    if not all(t.is_alive() for t in threads):
                        supervisor.coord.join(threads, stop_grace_period_secs=10)  # raises what the runner reported
                        pytest.fail(
                            f"the runner stopped, reporting nothing; coordinator stopped: {supervisor.should_stop()}"
                        )
                    assert time.monotonic() < deadline, "the runner enqueued fewer than 100 in 30 s"
            # join() raises the first error a thread reported; stop() would hide a CancelledError.
            supervisor.coord.join(threads, stop_grace_period_secs=10)
            supervisor.stop()


def test_only_the_latest_sessions_first_close_stops_the_coordinator():
    # A script's retry loop makes one session after another: closing an older one again, or its
    # garbage collection (a session in a reference cycle is finalized whenever the collector runs),
    # must not stop the training of the session made since.
    with tf.Graph().as_default():
        supervisor = Supervisor(logdir=None, init_op=_v1.global_variables_initializer(), summary_op=None, saver=None)
        closed_first = supervisor.prepare_or_wait_for_session("")
        closed_first.close()
        never_closed = supervisor.prepare_or_wait_for_session("")
        current = supervisor.prepare_or_wait_for_session("")
        closed_first.close()  # again: a no-op in TF 1.x
        del closed_first, never_closed
        gc.collect()
        assert not supervisor.should_stop()
        current.close()
        assert supervisor.should_stop()
        supervisor.stop()


def test_sessions_made_back_to_back_without_a_stop_each_train(in_process_cluster):
    # A script may make its next session as soon as it closed the last, without sv.stop()
    # or a join: the closed session's queue-runner threads, still winding down, must not
    # report their cut-off into the coordinator the next session has just cleared.
    with tf.Graph().as_default():
        rounds, supervisor = _queue_runners_on_the_ps("compat_supervision_back_to_back")
        options = _v1.RunOptions(timeout_in_ms=10_000)
        stopped = []
        for round_index, (size, runner) in enumerate(rounds):
            with supervisor.prepare_or_wait_for_session(in_process_cluster.targets["worker"][0]) as session:
                supervisor.start_queue_runners(session, [runner])
                before = session.run(size, options=options)
                deadline = time.monotonic() + 30
                while session.run(size, options=options) < before + 100 and time.monotonic() < deadline:
                    if supervisor.should_stop():
                        stopped.append(round_index)
                        break
        supervisor.stop()
    assert not stopped, f"rounds stopped by the previous session's threads: {stopped}"
