"""The Spark launcher judges a finished stage by the local launcher's verdict (no Spark needed)."""

import io

from ps_toolkit.backends.local import LaunchOptions
from ps_toolkit.backends.spark import launcher as spark_launcher
from ps_toolkit.launch.status import Console
from ps_toolkit.launch.task_plan import Topology

TRAINED = b'ps_toolkit progress: {"global_step": 40}\n'


def _judge(tmp_path, results):
    options = LaunchOptions(Topology(num_ps=1, num_workers=2), command=("python", "task.py"), quiet=True)
    rows = [(name, f"localhost:{2222 + i}", code, 1.0, 0, output) for i, (name, code, output) in enumerate(results)]
    return spark_launcher._judge(rows, 0, options, str(tmp_path), Console(io.StringIO(), tty=False), print)


def test_a_chief_that_trained_with_every_task_ending_zero_succeeds(tmp_path):
    outcome = _judge(tmp_path, [("ps:0", 0, b""), ("worker:0", 0, TRAINED), ("worker:1", 0, TRAINED)])
    assert outcome.succeeded, outcome.message


def test_a_worker_that_failed_fails_the_run_although_the_chief_ended_zero(tmp_path):
    outcome = _judge(tmp_path, [("ps:0", 0, b""), ("worker:0", 0, TRAINED), ("worker:1", 2, b"bad flag\n")])
    assert not outcome.succeeded
    assert "worker:1" in outcome.message and outcome.exit_code == 2


def test_a_chief_that_ended_zero_without_training_fails_the_run(tmp_path):
    outcome = _judge(tmp_path, [("ps:0", 0, b""), ("worker:0", 0, b"started\n"), ("worker:1", 0, b"")])
    assert not outcome.succeeded
    assert "nothing trained" in outcome.message
