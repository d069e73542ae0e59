"""mnist_low_level_distributed.py: learns on a local cluster (fewer steps than its README says); a missing data dir."""

import os

import pytest

from tests.fixtures_legacy.launch import launch, legacy
from tests.fixtures_legacy.missing_data import assert_missing_data_dir_is_one_line

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mnist_low_level_distributed.py")
LAUNCHER = ["--num_ps=1", "--num_workers=2", "--success_policy=all_workers", "--ps_grace_secs=0"]


@pytest.mark.slow
def test_low_level_distributed_mnist(tmp_path):
    run = launch(tmp_path / "run", LAUNCHER, legacy(SCRIPT, "--train_steps=400"))
    assert run.returncode == 0, run.describe()
    found = run.final_accuracies(r"test accuracy ([0-9.]+)")
    assert set(found) == {"worker-0", "worker-1"} and min(found.values()) >= 0.85, run.describe()


def test_a_missing_data_dir_is_one_line(tmp_path):
    assert_missing_data_dir_is_one_line(SCRIPT, tmp_path)
