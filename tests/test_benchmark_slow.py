"""The benchmark end to end: scripts/benchmark.py with a tiny configuration, real processes.

Bounded by the subprocess timeout; the script itself ends every process it starts.
"""

import json
import os
import subprocess
import sys

import pytest

from benchmarks import report

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_benchmark_script_runs_end_to_end(tmp_path):
    command = [
        sys.executable,
        os.path.join(REPO, "scripts", "benchmark.py"),
        "--quick",
        "--models=softmax",
        "--systems=ps_toolkit,single_process",
        # 1,500 async steps: the replicas must train side by side past warm-up
        # (20% of the run) even when, on a loaded machine, the second worker
        # joins a few seconds after the chief; 750 sync steps.
        "--steps_scale=0.5",
        "--repetitions=1",
        f"--out={tmp_path}",
    ]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(command, capture_output=True, text=True, timeout=540, env=env, cwd=REPO)
    context = f"$ {' '.join(command)}\nexit {done.returncode}\n{done.stdout}\n{done.stderr[-6000:]}"
    assert done.returncode == 0, context
    written = json.loads((tmp_path / "results.json").read_text())
    results = written["results"]
    # The main job, one real launch per start method (--repetitions=1), side by side.
    main_job = written["meta"]["main_job"]
    for method in ("fork", "exec", "host"):
        assert main_job[method]["median"] > 0 and main_job[method]["cpu"]["median"] > 0, main_job
    assert main_job["host_over_exec"] > 0 and main_job["fork_over_exec"] > 0, main_job
    assert {(r["system"], r["mode"]) for r in results} == {
        ("ps_toolkit", "async"),
        ("ps_toolkit", "sync"),
        ("single_process", "async"),
    }, context
    for r in results:
        assert set(report.RECORD_KEYS) <= set(r)
        assert 0 < r["min"] <= r["steps_per_sec"] <= r["max"]
        assert r["accuracy"] is None or r["accuracy"] > 0.5, r  # training worked
        if r["system"] == "ps_toolkit":
            assert not r["killed_at_exit"], r  # shipped tasks exit by themselves
    assert (tmp_path / "results.png").stat().st_size > 0
    assert "| softmax | async | 1+2 |" in (tmp_path / "results.md").read_text()
