"""Test helper: a legacy example run with a --data_dir that does not exist must say so in one line and exit 2."""

from __future__ import annotations

import os

from tests.taskrun import python_command, run_tasks

from .launch import RUN_LEGACY


def assert_missing_data_dir_is_one_line(script: str, tmp_path, *args: str, env: dict | None = None) -> None:
    """``run_legacy.py SCRIPT --job_name=worker --data_dir=TMP/nope ARGS``: exit 2, one error line, no traceback."""
    missing = f"{tmp_path}/nope"
    command = python_command(RUN_LEGACY, script, "--job_name=worker", f"--data_dir={missing}", *args)
    name = os.path.basename(script)
    outcome = run_tasks({name: command}, timeout=120, env=env)[name]
    detail = outcome.describe()
    assert outcome.returncode == 2, detail
    assert "Traceback" not in outcome.stderr, detail
    errors = [line for line in outcome.stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1 and missing in errors[0], detail
