"""A session's close with a bound: a close held by a peer does not hold the task's end."""

import threading

import pytest
import tensorflow as tf

from ps_toolkit.base import session_close


class _HeldClose:
    """A close that returns only once released, as a gRPC close waiting on a peer that is gone."""

    def __init__(self):
        self.release = threading.Event()
        self.returned = threading.Event()

    def close(self):
        self.release.wait(60)
        self.returned.set()


def test_a_held_close_is_left_running_past_the_bound():
    held = _HeldClose()
    try:
        assert session_close.call_within(held.close, bound_secs=0.05, what="held") is False
        assert not held.returned.is_set()
    finally:
        held.release.set()
    assert held.returned.wait(10)


def test_a_close_that_returns_in_time_is_waited_for_and_its_error_raised():
    assert session_close.call_within(lambda: None, bound_secs=10) is True

    def failing():
        raise RuntimeError("close failed")

    with pytest.raises(RuntimeError, match="close failed"):
        session_close.call_within(failing, bound_secs=10)


def test_a_bounded_session_still_closes_for_real():
    with tf.Graph().as_default():
        session = session_close.bound_close(tf.compat.v1.Session(), bound_secs=30, what="local")
        assert session.run(tf.constant(3)) == 3
        session.close()
        with pytest.raises(RuntimeError, match="closed Session"):
            session.run(tf.constant(1))
