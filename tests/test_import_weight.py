"""The package, its flag modules and the processes that only start or watch others import no TensorFlow:
bad input and --help are answered in milliseconds, and the launcher and the benchmark's controller spend
no import's CPU while their tasks run."""

import os
import subprocess
import sys

import pytest

# The benchmarks package sits beside the tests, in the checkout, not in the wheel.
CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize(
    "modules",
    [
        "ps_toolkit, ps_toolkit.cli, ps_toolkit.api, ps_toolkit.training.user_code, ps_toolkit.training.model_api",
        # The launcher and its chart.
        "ps_toolkit.tools.launch_local, ps_toolkit.launch.charts",
        # The benchmark's controller: it writes the data set, starts every system, reports.
        "benchmarks.cli, benchmarks.driver, benchmarks.main_job, benchmarks.report, ps_toolkit.models.mnist_files",
    ],
    ids=["package", "launcher", "benchmark"],
)
def test_modules_import_without_tensorflow(modules):
    code = f"import sys, {modules}; print('tensorflow' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=CHECKOUT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False", done.stdout
