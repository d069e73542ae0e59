"""A TensorFlow session's close with a bound: a distributed close waits on every peer's answer.

``Session.close()`` of a session on a gRPC target waits until the master's
runs are cleaned up on every task that held a part of them and the worker
sessions there are deleted. A peer that is gone or stalled holds the close
for seconds, or for ever: seen at the end of async runs of a model with many
partitioned tables, the last step long done, 0% CPU, the master waiting in
CloseSession. A task that closes a session on its way out needs none of that
cleanup (its peers drop the session's state when they exit), so its close
may stop waiting.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

# A healthy close takes 0.02-0.3 s on the 2-core machine; the tasks that bound their close send
# everything before it and exit right after, so a close cut short loses nothing.
CLOSE_BOUND_SECS = 0.25


def call_within(call: Callable[[], None], bound_secs: float = CLOSE_BOUND_SECS, what: str = "session") -> bool:
    """Runs ``call()`` (a session's ``close``, say), waiting at most ``bound_secs``; past the bound it
    goes on in the background (a daemon thread: the task's exit does not wait for it).

    Args:
        call: What to run.
        bound_secs: The longest wait.
        what: Its name in the line logged when the bound passes.

    Returns:
        True if ``call()`` returned within the bound. Its exception, if it
        raised in time, is raised here.
    """
    raised: list[BaseException] = []

    def run():
        try:
            call()
        except BaseException as err:  # handed to the caller's thread below
            raised.append(err)

    closer = threading.Thread(target=run, name=f"close {what}", daemon=True)
    closer.start()
    closer.join(bound_secs)
    if closer.is_alive():
        log.warning("%s: not done within %.1f s (a peer is slow to answer); not waiting", what, bound_secs)
        return False
    if raised:
        raise raised[0]
    return True


def bound_close(session, bound_secs: float = CLOSE_BOUND_SECS, what: str = "session"):
    """Makes ``session.close()`` return within ``bound_secs`` (``call_within``); returns ``session``.

    For a session closed by code that is not ours: MonitoredSession closes the
    session its creator returned.
    """
    close = session.close
    session.close = lambda: call_within(close, bound_secs, f"closing {what}")
    return session
