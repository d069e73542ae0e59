"""The quick start as a newcomer runs it: a short console, a chart with points, nothing left behind."""

import json
import os
import re
import subprocess
import sys

import pytest

from ps_toolkit.launch.source_files import toolkit_files
from ps_toolkit.launch.task_output import PROGRESS_PREFIX

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCHER = os.path.join(ROOT, "scripts", "launch_local.py")
STATUS_LINE = re.compile(r"\s*\d+(\.\d+)?s step ")
# The forms of every line the quick start's console may show: the launchers' own lines, the summary table, and
# each task's toolkit log lines and result; a line of any other form (a TensorFlow block the console filter
# does not know, such as 2.22's "=== Source Location Trace: ===" and its source paths) fails the test.
LAUNCHER_LINE = re.compile(r"^(launcher|launch_local\.py|fork server): ")
TABLE_LINE = re.compile(r"^(task +address +exit status .*|-+(  -+)+|(ps|worker):\d+ +\S+ +\d+ \(\w+\) .*)$")
TASK_LINE = re.compile(r"^\[(ps|worker):\d+\] (?:[IWE]\d{4} [\d:.]+ +\d+ (?P<source>[\w.]+\.py):\d+\] |\{.*\}$)")
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
    unknown = [line for line in said if not _known_form(line)]
    assert not unknown, f"lines of no known form on the console: {unknown}\n{console}"
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


def _known_form(line: str) -> bool:
    """Whether ``line`` is one the quick start's console shows by design (a task's log line from a toolkit file)."""
    task_line = TASK_LINE.match(line)
    if task_line:
        return task_line.group("source") is None or task_line.group("source") in toolkit_files()
    return bool(LAUNCHER_LINE.match(line) or TABLE_LINE.match(line))
