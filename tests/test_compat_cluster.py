"""TF 1.x session machinery under the compat layer ends by itself: sync replicas, MonitoredTrainingSession, ps join."""

import os
import re

import pytest
from fixtures_legacy.launch import launch, legacy

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures_legacy")


@pytest.mark.slow
def test_sync_monitored_training_session_ends_on_every_worker(tmp_path):
    run = launch(
        tmp_path / "run",
        ["--num_ps=1", "--num_workers=2", "--success_policy=all_workers", "--ps_grace_secs=0"],
        legacy(os.path.join(FIXTURES, "mts_sync.py"), "--train_steps=150"),
        timeout_secs=120,
    )
    assert run.returncode == 0, run.describe()
    for index in (0, 1):
        found = re.findall(r"worker \d done at global step (\d+)", run.logs[f"worker-{index}"])
        # The step read in the same run as the last update: the value just before it.
        assert found and int(found[-1]) >= 149, run.describe()
    # The chief's blocked queue runner is logged after a short grace, not raised after 120 s.
    assert "Traceback" not in run.logs["worker-0"], run.describe()
