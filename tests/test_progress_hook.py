"""compat.progress_hook: the progress records an old script's MonitoredTrainingSession prints under a launcher."""

import io
import json

import pytest

tf = pytest.importorskip("tensorflow")

from ps_toolkit.base.progress_lines import PROGRESS_PREFIX  # noqa: E402
from ps_toolkit_compat import progress_hook  # noqa: E402

v1 = tf.compat.v1


def _records(stream):
    return [json.loads(line[len(PROGRESS_PREFIX) :]) for line in stream.getvalue().splitlines()]


def test_a_global_step_that_goes_back_gives_no_negative_rate(monkeypatch):
    """A script's own global_step variable, set back (as a restore from an older checkpoint does)."""
    monkeypatch.setattr(progress_hook, "INTERVAL_SECS", 0.0)
    stream = io.StringIO()
    with tf.Graph().as_default():
        step = v1.Variable(0, name="global_step", trainable=False, use_resource=False)  # not in the collection
        train = v1.assign_add(step, 1)
        set_back = v1.assign(step, 1)
        with v1.train.MonitoredSession(hooks=[progress_hook.ProgressHook(stream)]) as session:
            for _ in range(3):
                session.run(train)
            session.run(set_back)
            session.run(train)
    records = _records(stream)
    assert [r["global_step"] for r in records] == [1, 2, 3, 1, 2, 2]
    assert [r["local_step"] for r in records] == [1, 2, 3, 4, 5, 5]
    assert all(r["steps_per_sec"] >= 0 for r in records), records
    assert records[3]["steps_per_sec"] == 0.0 and records[4]["steps_per_sec"] > 0


def test_an_evaluations_metrics_are_one_record():
    stream = io.StringIO()
    progress_hook.print_evaluation({"global_step": 60, "accuracy": 0.994, "loss": 0.02, "label": b"x"}, stream)
    (record,) = _records(stream)
    assert record["evaluation"] is True and "label" not in record
    assert (record["global_step"], record["accuracy"], record["loss"]) == (60, 0.994, 0.02)
