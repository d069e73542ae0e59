"""Importing the package and the flag modules imports no TensorFlow: bad input is reported in milliseconds."""

import subprocess
import sys


def test_package_and_flag_modules_import_without_tensorflow():
    code = (
        "import sys, ps_toolkit, ps_toolkit.cli, ps_toolkit.api, ps_toolkit.training.user_code, "
        "ps_toolkit.training.model_api; "
        "print('tensorflow' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False", done.stdout
