"""The verdict's evidence of work without training, and its word on a chief that did nothing.

Unit tests read real forms of the lines (TensorFlow's export log lines, tf_cnn_benchmarks' table); the
launcher tests run tests/fixtures/work_shapes.py (no TensorFlow), one stand-in per shape of public script.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.launch import role_hint, verdict
from ps_toolkit.launch.policy import Policy
from ps_toolkit.launch.work_evidence import WorkSigns, compile_pattern
from tests.test_launcher import FAST, LAUNCHER, ROOT, explain

SHAPES = os.path.join(ROOT, "tests", "fixtures", "work_shapes.py")
TF_CNN_LINES = [
    "Running warm up",
    "Done warm up",
    "Step\tImg/sec\ttotal_loss",
    "1\timages/sec: 7.1 +/- 0.0 (jitter = 0.0)\t7.239",
    "10\timages/sec: 7.2 +/- 0.0 (jitter = 0.1)\t7.198",
    "----------------------------------------------------------------",
    "total images/sec: 335.14",
]


def scanned(lines, pattern=None, records=()) -> WorkSigns:
    signs = WorkSigns(pattern)
    for line in lines:
        signs.scan(line, None)
    for record in records:
        signs.scan("", record)
    return signs


def test_a_restore_then_an_export_is_work_in_tensorflows_log_forms():
    lines = [
        "INFO:tensorflow:Restoring parameters from /m/model.ckpt-1000",
        "I1202 07:01:02.123456 140 saver.py:1413] Restoring parameters from /m/model.ckpt-1000",
        "INFO:tensorflow:SavedModel written to: /e/1700000000/saved_model.pb",
    ]
    said = scanned(lines).evidence()
    assert said == "restored /m/model.ckpt-1000 and exported /e/1700000000/saved_model.pb", said


def test_a_restore_alone_or_an_export_alone_is_no_work():
    assert scanned(["INFO:tensorflow:Restoring parameters from /m/model.ckpt-5"]).evidence() is None
    assert scanned(["INFO:tensorflow:SavedModel written to: /e/saved_model.pb"]).evidence() is None


def test_the_compat_layers_records_of_an_export_an_evaluation_and_predictions_are_work():
    export = {"work": "exported", "checkpoint": "/m/model.ckpt-9", "path": "/e/1"}
    assert scanned([], records=[export]).evidence() == "restored /m/model.ckpt-9 and exported /e/1"
    predicted = {"work": "predicted", "checkpoint": "/m/model.ckpt-9", "count": 200}
    assert scanned([], records=[predicted]).evidence() == "restored /m/model.ckpt-9 and predicted 200 examples"
    evaluated = {"work": "evaluated", "checkpoint": "/m/model.ckpt-9", "global_step": 9}
    assert scanned([], records=[evaluated]).evidence() == "restored /m/model.ckpt-9 and evaluated it"
    assert scanned([], records=[{"work": "predicted", "checkpoint": None, "count": 3}]).evidence() is None


def test_tf_cnn_benchmarks_table_and_throughput_are_work():
    assert scanned(TF_CNN_LINES).evidence() == "its throughput line 'total images/sec: 335.14'"
    assert scanned(TF_CNN_LINES[:5]).evidence() == "2 rows of its Step ... loss table"
    # Rows without their header are not a table: any "3  4.5" line would be.
    assert scanned(TF_CNN_LINES[3:5]).evidence() is None


def test_success_pattern_matches_any_line_and_a_bad_one_is_refused_naming_it():
    pattern = compile_pattern(r"widgets polished")
    assert "all 42 widgets polished" in scanned(["x", "all 42 widgets polished"], pattern).evidence()
    assert scanned(["all 42 widgets"], pattern).evidence() is None
    with pytest.raises(ConfigError, match=re.escape("--success_pattern='(' is not a regular expression")):
        Policy(success_pattern="(")


class _Output:
    def __init__(self, lines):
        self.result, self.global_step, self.printed_accuracy, self.printed_loss = None, None, None, None
        self.printed_local_step = None
        self.work = scanned(lines)


def test_confirm_calls_an_export_only_run_a_success_with_no_training_step():
    outputs = {"chief:0": _Output(["Restoring parameters from /m/c-1", "SavedModel written to: /e/1"])}
    ends = [verdict.TaskEnd("chief:0", "finished")]
    ok, message, code = verdict.confirm("the chief (chief:0) finished with status 0", ends, outputs, "chief:0", [])
    assert ok and code == 0, message
    assert message.endswith(
        "(no training step the launcher could count; its work: restored /m/c-1 and exported /e/1 (chief:0))"
    ), message


def test_confirm_fails_a_chief_that_did_nothing_with_the_hint():
    outputs = {"chief:0": _Output(["Restoring parameters from /m/c-1"])}
    ends = [verdict.TaskEnd("chief:0", "finished")]
    ok, message, code = verdict.confirm("m", ends, outputs, "chief:0", ["last"], hint="likely cause: X")
    assert not ok and code == verdict.EXIT_NOTHING_TRAINED, message
    assert "but nothing trained" in message and "; likely cause: X; last lines of chief:0:\n    last" in message


def test_role_hint_names_the_quoted_role_its_line_and_the_flag(tmp_path):
    script = tmp_path / "trainer" / "task.py"
    script.parent.mkdir()
    script.write_text(
        "import os\n# 'chief' in a comment is no evidence\nif job_name in ['master', 'worker']:\n    run()\n"
    )
    hint = role_hint.chief_role_hint(["python", "run_legacy.py", "-m", "trainer.task", "--x=1"], str(tmp_path), "chief")
    assert hint == (
        "likely cause: the script's code names the chief role 'master' (trainer/task.py:3), which this cluster "
        "does not use (its chief's job name is 'chief'); try --chief_role_name=master"
    ), hint
    assert role_hint.chief_role_hint(["python", str(script)], str(tmp_path), "master") == ""
    assert "try --chief --chief_role_name=master" in role_hint.chief_role_hint(["python", str(script)], "/", "worker")
    assert role_hint.chief_role_hint(["python", "-m", "trainer.missing"], str(tmp_path), "chief") == ""


def run_shape(shape, flags, tmp_path):
    argv = [sys.executable, LAUNCHER, f"--log_dir={tmp_path / 'run'}", *FAST, *flags, "--", sys.executable, SHAPES]
    argv.append(f"--shape={shape}")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=90, cwd=ROOT)
    output = done.stdout + done.stderr
    return done.returncode, output, explain(argv, done.returncode, output)


CHIEF_AND_WORKER = ["--num_ps=0", "--num_workers=1", "--chief"]


def test_an_export_only_run_succeeds_saying_it_counted_no_training_step(tmp_path):
    code, output, shown = run_shape("export", CHIEF_AND_WORKER, tmp_path)
    assert code == 0, shown
    said = (
        "launcher: succeeded: the chief (chief:0) finished with status 0 (no training step the launcher could count; "
    )
    said += "its work: restored "
    assert said + "/tmp/model_dir/model.ckpt-1000 and exported /tmp/export/1700000000/saved_model.pb" in output, shown


def test_a_tf_cnn_benchmarks_shaped_run_succeeds_on_its_throughput_lines(tmp_path):
    code, output, shown = run_shape("throughput", ["--num_ps=1", "--num_workers=2"], tmp_path)
    assert code == 0, shown
    assert "its work: its throughput line 'total images/sec: 335.14' (worker:0)" in output, shown


def test_a_chief_that_knows_only_master_fails_naming_the_role_and_the_flag(tmp_path):
    code, output, shown = run_shape("master_only", CHIEF_AND_WORKER, tmp_path)
    assert code == verdict.EXIT_NOTHING_TRAINED, shown
    assert "finished with status 0, but nothing trained" in output, shown
    assert "names the chief role 'master' (tests/fixtures/work_shapes.py:" in output, shown
    assert "try --chief_role_name=master" in output, shown
    code, output, shown = run_shape("master_only", CHIEF_AND_WORKER + ["--chief_role_name=master"], tmp_path)
    assert code == 0 and "launcher: succeeded" in output, shown


def test_own_words_fail_without_success_pattern_and_succeed_with_it(tmp_path):
    code, output, shown = run_shape("own_words", CHIEF_AND_WORKER, tmp_path)
    assert code == verdict.EXIT_NOTHING_TRAINED and "all 42 widgets polished" in output, shown
    code, output, shown = run_shape("own_words", CHIEF_AND_WORKER + ["--success_pattern=widgets polished$"], tmp_path)
    assert code == 0, shown
    assert "its work: a line matching --success_pattern ('all 42 widgets polished') (chief:0)" in output, shown
    code, output, shown = run_shape("own_words", CHIEF_AND_WORKER + ["--success_pattern=("], tmp_path)
    assert code == 2 and "--success_pattern='(' is not a regular expression" in output, shown
    assert "Traceback" not in output, shown
