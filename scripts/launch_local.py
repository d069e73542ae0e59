"""Runs a parameter-server cluster on this machine: one process per task, on loopback.

    python scripts/launch_local.py                     # 1 ps + 2 workers, async, default model

The checkout's form of ``ps-launch-local`` (installed) and ``python -m ps_toolkit.tools.launch_local``;
``--help`` lists its flags.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ps_toolkit.tools.launch_local import main  # noqa: E402

if __name__ == "__main__":
    main()
