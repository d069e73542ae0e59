"""A step cancelled because a peer restarted goes on to the session's re-creation; any other cancel is an error."""

from types import SimpleNamespace

import pytest
import tensorflow as tf

from ps_toolkit.base.errors import error_summary
from ps_toolkit.cluster.config import ClusterConfig
from ps_toolkit.task.roles import trainer

# As TensorFlow reported a ps:1 restart in one of the failing runs (the CANCELLED part came first).
PEER_RESTARTED = """Graph execution error:

=====================
CANCELLED: From /job:worker/replica:0/task:1:
RecvFromRemoteAsync is cancelled.
ABORTED: From /job:ps/replica:0/task:1:
Session handle is not found: fd3d7cd4009b826c. Possibly this worker ("/job:ps/replica:0/task:1") just restarted.
====================="""


class _Session:
    def __init__(self, message: str):
        self.message, self.runs = message, 0

    def run(self, fetches, feed_dict=None):
        self.runs += 1
        raise tf.errors.CancelledError(None, None, self.message)


def _run_step(session) -> None:
    graph = SimpleNamespace(train_op=None, multi_step=None)
    config = SimpleNamespace(sync_replicas=True)
    cluster = ClusterConfig(jobs={"ps": ["localhost:1"], "worker": ["localhost:2"]}, task_type="worker", task_index=0)
    trainer._run_step(session, graph, config, cluster, progress=None)


def test_a_step_cancelled_by_a_peers_restart_is_not_an_error():
    session = _Session(PEER_RESTARTED)
    _run_step(session)
    assert session.runs == 1


def test_any_other_cancelled_step_is_an_error():
    with pytest.raises(tf.errors.CancelledError):
        _run_step(_Session("Graph execution error:\nCANCELLED: Run call was cancelled"))


def test_an_error_is_summed_up_by_its_first_telling_line():
    assert error_summary(PEER_RESTARTED) == "CANCELLED: From /job:worker/replica:0/task:1:"
    assert error_summary("Graph execution error:\n\nDeadline Exceeded") == "Deadline Exceeded"
    assert error_summary("plain") == "plain" and error_summary("") == ""
