"""mnist_shuffled_files.py: each worker reads other batches and learns (fewer steps than the README's command)."""

import os
import re

import pytest

from tests.fixtures_legacy.launch import launch, legacy
from tests.fixtures_legacy.missing_data import assert_missing_data_dir_is_one_line

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mnist_shuffled_files.py")
LAUNCHER = ["--num_ps=1", "--num_workers=2", "--success_policy=all_workers", "--ps_grace_secs=0"]


@pytest.mark.slow
def test_shuffled_files_give_each_worker_different_batches(tmp_path):
    run = launch(tmp_path / "run", LAUNCHER, legacy(SCRIPT, "--train_steps=300"))
    assert run.returncode == 0, run.describe()
    checksums = {name: re.findall(r"checksum (\d+)", text) for name, text in run.logs.items() if "worker" in name}
    assert checksums["worker-0"] != checksums["worker-1"], run.describe()
    assert min(run.final_accuracies(r"test accuracy ([0-9.]+)").values()) >= 0.85, run.describe()


def test_a_missing_data_dir_is_one_line(tmp_path):
    assert_missing_data_dir_is_one_line(SCRIPT, tmp_path)
