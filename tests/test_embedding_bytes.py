"""A step of the 1M x 32 embedding model moves about the rows it touches, never the table (benchmarks.embedding_bytes).

Bytes, not time: counted on a private loopback that carries only the cluster's own traffic.
"""

import json
import sys

import pytest

from tests.taskrun import run_tasks


@pytest.mark.slow
def test_bytes_per_step_are_within_2x_of_the_rows_touched():
    command = [sys.executable, "-m", "benchmarks.embedding_bytes", "--steps=60"]
    outcome = run_tasks({"bytes": command}, timeout=400)["bytes"]
    assert outcome.returncode == 0, outcome.describe()
    rows = [json.loads(line) for line in outcome.stdout.splitlines() if line.startswith('{"mode"')]
    assert len(rows) == 3, outcome.describe()
    for row in rows:
        assert row["ratio_to_touched"] < 2.0, row
        assert row["bytes_per_step"] < row["table_bytes"] / 20, row
