"""benchmarks/tfra_tests.py's reading of a pytest run: outcomes and one-line reasons, the rate over a baseline."""

import os
import sys

import pytest

from benchmarks import tfra_tests
from benchmarks.tfra_test_results import FAILED, PASSED, SKIPPED, FileRun, compare, format_rates

TESTS = """
import unittest

class KernelTest(unittest.TestCase):
    def test_passes(self):
        self.assertEqual(1, 1)

    def test_raises(self):
        raise ValueError("upsert is not served\\nsecond line")

    def test_compares(self):
        self.assertEqual([1, 2], [1, 3])

    @unittest.skip("needs a GPU")
    def test_skipped(self):
        pass
"""


def _run(tmp_path, name, text):
    (tmp_path / f"{name}.py").write_text(text)
    command = [sys.executable, *tfra_tests._pytest_args(f"{name}.py"), "-p", "no:xdist", "-p", "no:randomly"]
    return tfra_tests.run_file(command, str(tmp_path), name, 120, dict(os.environ))


def test_each_test_has_its_outcome_and_a_one_line_reason(tmp_path):
    run = _run(tmp_path, "kernel_test", TESTS)
    assert run.file_error == ""
    assert run.tests["KernelTest::test_passes"] == (PASSED, "")
    assert run.tests["KernelTest::test_raises"] == (FAILED, "ValueError: upsert is not served")
    outcome, reason = run.tests["KernelTest::test_compares"]
    assert outcome == FAILED and reason.startswith("AssertionError: Lists differ: [1, 2] != [1, 3]"), reason
    assert run.tests["KernelTest::test_skipped"] == (SKIPPED, "needs a GPU")


def test_a_file_that_does_not_import_fails_each_baseline_test_with_its_import_error(tmp_path):
    run = _run(tmp_path, "kernel_test", "import tensorflow_recommenders_addons.utils.nowhere\n" + TESTS)
    assert run.tests == {}
    assert run.file_error == "ModuleNotFoundError: No module named 'tensorflow_recommenders_addons'", run.file_error
    baseline = FileRun(tests={"KernelTest::test_passes": (PASSED, ""), "KernelTest::test_raises": (PASSED, "")})
    rate = compare("kernel_test", baseline, run)
    assert (rate.baseline_passed, rate.passed_here, rate.rate) == (2, 0, 0.0)
    assert rate.failures[0] == ("KernelTest::test_passes", f"not run: {run.file_error}")


def test_the_rate_counts_only_the_tests_that_pass_on_the_baseline(tmp_path):
    here = _run(tmp_path, "kernel_test", TESTS)
    baseline = FileRun(
        tests={
            "KernelTest::test_passes": (PASSED, ""),
            "KernelTest::test_raises": (PASSED, ""),
            "KernelTest::test_compares": (FAILED, "also on real TFRA"),
            "KernelTest::test_skipped": (PASSED, ""),
        }
    )
    rate = compare("kernel_test", baseline, here)
    assert (rate.baseline_passed, rate.passed_here) == (3, 1)
    assert rate.rate == pytest.approx(1 / 3)
    text = format_rates([rate], "real TFRA", "here")
    assert "kernel_test::KernelTest::test_raises: failed: ValueError: upsert is not served" in text
    assert "kernel_test::KernelTest::test_skipped: skipped: needs a GPU" in text
    assert text.splitlines()[-4].split() == ["overall", "3", "1", "33.3%"]


def test_a_source_tree_without_the_test_files_is_one_line(tmp_path, capsys):
    code = tfra_tests.main([f"--tfra_source={tmp_path}"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tfra_tests.py: error: --tfra_source={tmp_path} has no tensorflow_recommenders_addons/")
    assert len(err.strip().splitlines()) == 1
