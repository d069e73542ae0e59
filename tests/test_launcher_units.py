"""Fast unit tests of the launcher's parts: plans, parsing, output, status, chart. No processes."""

from __future__ import annotations

import io
import json

import pytest

from ps_toolkit.backends.local import LaunchOptions
from ps_toolkit.base.errors import ConfigError
from ps_toolkit.launch.charts import write_progress_chart
from ps_toolkit.launch.drills import DrillSchedule, parse_kill
from ps_toolkit.launch.policy import Policy
from ps_toolkit.launch.status import Console, StepRate, SummaryRow, status_text, summary_table
from ps_toolkit.launch.task_output import TaskOutput, parse_progress, parse_result
from ps_toolkit.launch.task_plan import Topology, default_command, plan_tasks


@pytest.mark.parametrize(
    "text, expected",
    [("ps:0@5s", ("ps", 0, 5.0)), ("worker:12@0.5", ("worker", 12, 0.5)), ("chief:0@.25s", ("chief", 0, 0.25))],
)
def test_parse_kill(text, expected):
    assert parse_kill(text) == expected


@pytest.mark.parametrize("text", ["ps0@5s", "ps:0", "ps:-1@5s", "boss:0@1s", "ps:0@5m", "ps:0@"])
def test_parse_kill_rejects(text):
    with pytest.raises(ConfigError, match="JOB:INDEX@SECONDS"):
        parse_kill(text)


def test_topology_counts_become_loopback_addresses():
    topology = Topology(num_ps=2, num_workers=1, chief=True, evaluator=True)
    assert topology.num_tasks == 5
    assert topology.jobs_for_ports([1001, 1002, 1003, 1004, 1005]) == {
        "chief": ("localhost:1001",),
        "worker": ("localhost:1002",),
        "ps": ("localhost:1003", "localhost:1004"),
        "evaluator": ("localhost:1005",),
    }


def test_topology_rejects_a_cluster_without_replicas():
    with pytest.raises(ConfigError, match="--num_workers=0"):
        Topology(num_ps=1, num_workers=0)


def test_explicit_hosts_need_no_ports():
    topology = Topology(hosts={"ps": ("localhost:9001",), "worker": ("localhost:9002", "localhost:9003")})
    assert topology.explicit and topology.num_tasks == 3
    assert topology.jobs_for_ports(()) == {"ps": ("localhost:9001",), "worker": ("localhost:9002", "localhost:9003")}


def test_plans_append_cluster_flags_and_set_tf_config():
    jobs = {"ps": ("localhost:9001",), "worker": ("localhost:9002", "localhost:9003")}
    plans = plan_tasks(jobs, ["python", "train.py", "--data_dir=/d"], base_env={"PATH": "/bin"})
    assert [p.name for p in plans] == ["ps:0", "worker:0", "worker:1"]
    worker1 = plans[2]
    assert worker1.argv == (
        "python",
        "train.py",
        "--data_dir=/d",
        "--ps_hosts=localhost:9001",
        "--worker_hosts=localhost:9002,localhost:9003",
        "--job_name=worker",
        "--task_index=1",
    )
    assert json.loads(worker1.env["TF_CONFIG"]) == {
        "cluster": {"ps": ["localhost:9001"], "worker": ["localhost:9002", "localhost:9003"]},
        "task": {"type": "worker", "index": 1},
    }
    assert worker1.env["PATH"] == "/bin"


def test_default_command_runs_run_task_with_training_flags():
    command = default_command(["--train_steps=5"])
    assert command[1].endswith("scripts/run_task.py") and command[2:] == ["--train_steps=5"]


def test_options_reject_a_drill_on_a_missing_task():
    with pytest.raises(ConfigError, match="no task ps:1"):
        LaunchOptions(Topology(num_ps=1, num_workers=1), command=("x",), policy=Policy(kills=(("ps", 1, 1.0),)))


def test_task_output_splits_lines_across_reads_and_parses_progress(tmp_path):
    echoed = []
    with open(tmp_path / "log", "ab") as log:
        out = TaskOutput("worker:1", log, echoed.append)
        out.feed("stdout", b'ps_toolkit progress: {"global_step": 3, "lo')
        out.feed("stdout", b'cal_step": 2}\nplain\n')
        out.feed("stderr", b"warning")
        out.feed("stdout", b'{"job": "worker", "local_steps": 9, "final_loss": 0.1}')
        out.feed("stderr", b"")
        out.feed("stdout", b"")
    assert out.progress == [{"global_step": 3, "local_step": 2}]
    assert out.result == {"job": "worker", "local_steps": 9, "final_loss": 0.1} and out.steps == 9
    # Progress records go to the status line and chart, not the console.
    assert echoed[0] == "[worker:1] plain" and "[worker:1] warning" in echoed
    assert (tmp_path / "log").read_text().splitlines()[1] == "plain"


@pytest.mark.parametrize("line", ["ps_toolkit progress: not json", "ps_toolkit progress: [1]", "other"])
def test_parse_progress_ignores_other_lines(line):
    assert parse_progress(line) is None


def test_parse_result_needs_a_result_object():
    assert parse_result('{"loss": 1}') is None and parse_result("done") is None and parse_result(None) is None


def test_a_ps_result_line_is_the_tasks_result(tmp_path):
    with open(tmp_path / "log", "ab") as log:
        out = TaskOutput("ps:0", log, None)
        out.feed("stdout", b'{"job": "ps", "task": 0, "replicas_done": 2, "seconds": 1.5}\n')
    assert out.result == {"job": "ps", "task": 0, "replicas_done": 2, "seconds": 1.5} and out.steps is None


def test_step_rate_over_its_window():
    rate = StepRate(window_secs=5.0)
    for second in range(10):
        rate.add(float(second), second * 100)
    assert rate.per_sec == pytest.approx(100.0)
    rate.add(10.0, 5)  # a restore from a checkpoint: start over
    assert rate.per_sec == 0.0


def test_status_line_and_summary_table():
    text = status_text(elapsed=3.0, global_step=120, rate=40.0, states={"ps:0": "running"}, cpu=150.0, rss=2**30)
    assert "step 120" in text and "40.0 steps/s" in text and "ps:0=running" in text and "1024 MiB" in text
    assert "accuracy" not in text
    evaluated = status_text(elapsed=3.0, global_step=120, rate=40.0, states={}, cpu=1.0, rss=1, accuracy=0.98512)
    assert "40.0 steps/s accuracy 0.9851 |" in evaluated
    table = summary_table([SummaryRow("worker:0", "localhost:1", "0 (finished)", 1, 2.5, 60)])
    header, rule, row = table.splitlines()
    assert header.split()[:2] == ["task", "address"] and set(rule) <= {"-", " "}
    assert row.split() == ["worker:0", "localhost:1", "0", "(finished)", "1", "2.5s", "60"]


def test_console_redraws_the_status_line_on_a_terminal():
    stream = io.StringIO()
    console = Console(stream, tty=True)
    console.status("step 1", now=0.0)
    console.line("[ps:0] hello")
    assert stream.getvalue() == "\r\x1b[2Kstep 1\r\x1b[2K[ps:0] hello\nstep 1"


def test_console_prints_plain_status_lines_at_intervals():
    stream = io.StringIO()
    console = Console(stream, tty=False)
    console.status("a", now=0.0)
    console.status("b", now=1.0)  # too soon
    console.status("c", now=10.0)
    assert stream.getvalue() == "a\nc\n"


def test_chart_is_written_from_progress_records(tmp_path):
    records = [{"time": 100.0 + i, "loss": 1.0 / (i + 1), "steps_per_sec": 50.0} for i in range(5)]
    path = tmp_path / "chart.png"
    assert write_progress_chart({"worker:0": records, "ps:0": []}, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not write_progress_chart({"worker:0": []}, str(tmp_path / "none.png"))


def test_drill_schedule_releases_drills_in_time_order():
    schedule = DrillSchedule([("worker", 1, 3.0), ("ps", 0, 1.0)], start=100.0)
    assert schedule.next_at() == 101.0 and schedule.due(100.5) == []
    assert schedule.due(103.0) == [("ps", 0, 1.0), ("worker", 1, 3.0)]
    assert schedule.next_at() == float("inf") and schedule.due(200.0) == []


def test_an_estimators_log_lines_give_the_global_step(tmp_path):
    output = TaskOutput("chief:0", open(tmp_path / "log", "ab"), None)  # noqa: SIM115 - closed below
    output.feed("stderr", b"INFO:tensorflow:Saving checkpoints for 0 into /m/model.ckpt.\n")
    assert output.global_step == 0
    output.feed("stderr", b"I1123 06:12:58.170337 139622 basic_session_run_hooks.py:262] loss = 0.3, step = 200\n")
    output.feed("stderr", b"INFO:tensorflow:Saving checkpoints for 300 into /m/model.ckpt.\n")
    assert output.global_step == 300 and output.printed_loss is None, "a library's log line is no print"
    output.feed("stdout", b"epoch 3: loss 0.25\n")
    assert output.printed_loss == 0.25
    output.close()


def test_task_args_and_chief_role_are_checked_when_the_plan_is_made():
    jobs = {"ps": ("localhost:9001",), "chief": ("localhost:9002",)}
    with pytest.raises(ConfigError, match=r"--task_args='--id=\{task\}' names \{task\}; the fields are job, index"):
        plan_tasks(jobs, ["python", "x.py"], base_env={}, task_args="--id={task}")
    with pytest.raises(ConfigError, match="--chief_role_name='boss'; valid: chief, master"):
        plan_tasks(jobs, ["python", "x.py"], base_env={}, chief_role="boss")
    chief = plan_tasks(jobs, ["python", "x.py"], base_env={}, chief_role="master", task_args="--role={job}")[1]
    assert chief.argv == ("python", "x.py", "--role=master") and json.loads(chief.env["PS_TOOLKIT_CLUSTER_ARGS"]) == [
        "--role=master"
    ]
    assert json.loads(chief.env["TF_CONFIG"])["cluster"] == {"ps": ["localhost:9001"], "master": ["localhost:9002"]}
