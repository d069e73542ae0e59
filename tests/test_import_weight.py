"""The package, its flag modules and the processes that only start or watch others import no TensorFlow:
bad input and --help are answered in milliseconds, and the launcher and the benchmark's controller spend
no import's CPU while their tasks run."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "modules",
    [
        "ps_toolkit, ps_toolkit.cli, ps_toolkit.api, ps_toolkit.training.user_code, ps_toolkit.training.model_api",
        # The launcher and its chart.
        "ps_toolkit.tools.launch_local, ps_toolkit.launch.charts",
        # The benchmark's controller: it writes the data set, starts every system, reports.
        "ps_toolkit.tools.benchmark, ps_toolkit.benchmarks.driver, ps_toolkit.benchmarks.main_job, "
        "ps_toolkit.benchmarks.report, ps_toolkit.models.mnist_files",
    ],
    ids=["package", "launcher", "benchmark"],
)
def test_modules_import_without_tensorflow(modules):
    code = f"import sys, {modules}; print('tensorflow' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False", done.stdout
