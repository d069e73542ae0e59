"""Runs a TensorFlow 1.x script unchanged on TensorFlow 2.21, through the compat layer.

    python scripts/run_legacy.py old_script.py --job_name=worker --task_index=0 ...

The checkout's form of ``ps-run-legacy`` (installed) and ``python -m ps_toolkit_compat.run_legacy``.
"""

import os
import sys

# The checkout's ps_toolkit; this folder (scripts/) is of no use to the legacy script.
sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from ps_toolkit_compat.run_legacy import main  # noqa: E402

if __name__ == "__main__":
    main()
