"""What the Ray and Spark launchers refuse before any engine starts (no Ray or Spark needed)."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("flag", ["--task_args=none", "--chief_role_name=master"])
def test_flags_the_engines_do_not_carry_are_refused_in_one_line(flag):
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "launch_ray.py"), flag],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and flag.split("=")[0] in lines[0] and "not served on Ray" in lines[0], done.stderr
