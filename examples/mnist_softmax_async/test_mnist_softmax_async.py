"""mnist_softmax_async.py: trains on a local cluster (fewer epochs than the README's command); a missing data dir."""

import os

import pytest

from tests.fixtures_legacy.launch import launch, legacy
from tests.fixtures_legacy.missing_data import assert_missing_data_dir_is_one_line

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mnist_softmax_async.py")
LAUNCHER = ["--num_ps=1", "--num_workers=2", "--success_policy=all_workers", "--ps_grace_secs=0"]


@pytest.mark.slow
def test_mastering_tensorflow_async(tmp_path):
    run = launch(tmp_path / "run", LAUNCHER, legacy(SCRIPT, "--n_epochs=60"))
    assert run.returncode == 0, run.describe()
    accuracies = run.final_accuracies()
    assert set(accuracies) == {"worker-0", "worker-1"} and min(accuracies.values()) >= 0.4, (
        run.describe()
    )  # 0.59-0.78 measured


def test_a_missing_data_dir_is_one_line(tmp_path):
    assert_missing_data_dir_is_one_line(SCRIPT, tmp_path)
