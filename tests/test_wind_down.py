"""The end after a success: an evaluator's bound follows its measured evaluations; every stop says why; the verdict
says whether the final checkpoint was evaluated (tests/fixtures/evaluator_end.py: no TensorFlow)."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

from ps_toolkit.launch import wind_down
from tests.test_launcher import FAST, LAUNCHER, ROOT, explain

FIXTURE = os.path.join(ROOT, "tests", "fixtures", "evaluator_end.py")


def evaluations(*spans):
    records = [{"evaluator_started": True, "time": 0.0}]
    for start, end, step in spans:
        records += [{"evaluation_started": True, "time": start}, {"evaluation": True, "global_step": step, "time": end}]
    return records


def test_the_evaluators_bound_follows_its_longest_evaluation_and_is_never_under_the_grace():
    assert wind_down.evaluation_times(evaluations((0.0, 2.0, 10), (5.0, 9.0, 20))) == [2.0, 4.0]
    bound, how = wind_down.evaluation_bound_secs(1.0, evaluations((0.0, 2.0, 10), (5.0, 9.0, 20)))
    assert bound == 3 * 4.0 + 10 and how == "3 x its longest evaluation (4.0 s) + 10 s", how
    assert wind_down.evaluation_bound_secs(60.0, evaluations((0.0, 2.0, 10)))[0] == 60.0
    assert wind_down.evaluation_bound_secs(1.0, evaluations())[0] == wind_down.UNMEASURED_EVALUATION_SECS
    # A task that never said it is an evaluator of the compat layer's (a script of its own) gets the grace.
    assert wind_down.evaluation_bound_secs(1.0, [])[0] == 1.0


def task(job, progress=(), global_step=None):
    output = SimpleNamespace(progress=list(progress), global_step=global_step)
    return SimpleNamespace(plan=SimpleNamespace(job=job, name=f"{job}:0"), output=output)


def test_the_final_evaluation_note_says_whether_the_final_checkpoint_was_evaluated():
    chief = task("chief", global_step=20)
    done = wind_down.final_evaluation_note([chief, task("evaluator", evaluations((0, 1, 20)))])
    assert done == "evaluator:0 evaluated the final checkpoint (global step 20)", done
    older = wind_down.final_evaluation_note([chief, task("evaluator", evaluations((0, 1, 10)))])
    assert older == "the final checkpoint (global step 20) was NOT evaluated: its last evaluation was of global step 10"
    assert wind_down.final_evaluation_note([chief]) == ""


def run(shape, tmp_path):
    argv = [sys.executable, LAUNCHER, f"--log_dir={tmp_path / 'run'}", *FAST, "--num_ps=1", "--num_workers=1"]
    argv += ["--chief", "--evaluator", "--", sys.executable, FIXTURE, f"--shape={shape}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT)
    output = done.stdout + done.stderr
    return done.returncode, output, explain(argv, done.returncode, output)


def test_an_evaluator_slower_than_the_grace_ends_by_itself_after_evaluating_the_final_checkpoint(tmp_path):
    code, output, shown = run("ends", tmp_path)
    assert code == 0, shown
    assert "evaluator:0 evaluated the final checkpoint (global step 20)" in output, shown
    assert "stopped by the launcher" not in output and "SIGTERM" not in output, shown


def test_an_evaluator_past_its_bound_is_stopped_saying_why_and_the_verdict_says_the_final_checkpoint_was_not_evaluated(
    tmp_path,
):
    code, output, shown = run("hangs", tmp_path)
    assert code == 0, shown
    verdict = output[output.index("launcher: succeeded") :]
    assert "the final checkpoint (global step 20) was NOT evaluated: its last evaluation was of global step 10" in (
        verdict
    ), shown
    why = "still evaluating 16 s after the chief's success (its bound: 3 x its longest evaluation (2."
    assert "stopped by the launcher: evaluator:0 (" + why in verdict, shown
    log = (tmp_path / "run" / "evaluator-0.log").read_text()
    assert "--- stopping (SIGTERM, then SIGKILL after the grace period): " + why in log, log[-2000:]
