"""The quick start as a newcomer runs it: a short console, a chart with points, nothing left behind."""

import json
import os
import re
import subprocess
import sys

import pytest

from ps_toolkit.launch.task_output import PROGRESS_PREFIX

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCHER = os.path.join(ROOT, "scripts", "launch_local.py")
STATUS_LINE = re.compile(r"\s*\d+(\.\d+)?s step ")
NOISE = ("cuInit", "ABORTED", "UNAVAILABLE", "Socket closed", "I0000 ", "E0000 ", "W0000 ", "absl::InitializeLog")


@pytest.mark.slow
def test_quick_start_console_shows_the_toolkits_lines_and_the_chart_has_a_point_per_run(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # as a newcomer's shell: TensorFlow at its noisiest
    done = subprocess.run([sys.executable, LAUNCHER], capture_output=True, text=True, timeout=400, env=env, cwd=ROOT)
    console = done.stdout + done.stderr
    assert done.returncode == 0, console
    assert not [line for line in console.splitlines() if any(word in line for word in NOISE)], console
    # Short whatever the machine's speed: the status line comes every 5 s, so it is not counted.
    said = [line for line in console.splitlines() if not STATUS_LINE.match(line)]
    assert len(said) < 45, console  # 30 measured
    state = tmp_path / f"ps_toolkit-{os.getuid()}"
    (run,) = (state / "runs").iterdir()
    assert f"launcher: logs in {run}" in console
    assert list((state / "ports").iterdir()) == []
    # Everything the console left out is in the task logs.
    assert "basic_session_run_hooks.py" in (run / "worker-0.log").read_text()
    assert "basic_session_run_hooks.py" not in console
    for worker in ("worker-0", "worker-1"):
        lines = (run / f"{worker}.log").read_text().splitlines()
        points = [json.loads(line[len(PROGRESS_PREFIX) :]) for line in lines if line.startswith(PROGRESS_PREFIX)]
        result = json.loads(next(line for line in reversed(lines) if line.startswith("{")))
        runs = result["local_steps"] // 20  # --steps_per_run's default
        assert len(points) >= runs, (worker, len(points), runs)
    assert (run / "progress.png").exists()
