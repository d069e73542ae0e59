"""mnist_softmax_sync.py: trains on a local cluster (fewer epochs than the README's command); a missing data dir."""

import os

import pytest

from tests.fixtures_legacy.launch import launch, legacy
from tests.fixtures_legacy.missing_data import assert_missing_data_dir_is_one_line

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mnist_softmax_sync.py")


@pytest.mark.slow
def test_mastering_tensorflow_sync(tmp_path):
    # Launcher-chosen ports: the script's flags replace the book's hard-coded 9001-9004.
    launcher = ["--num_ps=1", "--num_workers=3", "--success_policy=all_workers", "--ps_grace_secs=0"]
    run = launch(tmp_path / "run", launcher, legacy(SCRIPT, "--n_epochs=60"))
    assert run.returncode == 0, run.describe()
    accuracies = run.final_accuracies()
    assert set(accuracies) == {"worker-0", "worker-1", "worker-2"}, run.describe()
    assert accuracies["worker-0"] >= 0.25, run.describe()  # chance is 0.1; 0.31-0.40 measured


def test_a_missing_data_dir_is_one_line(tmp_path):
    assert_missing_data_dir_is_one_line(SCRIPT, tmp_path)
