"""Runs a parameter-server job on a Ray cluster: one Ray actor per task.

    python scripts/launch_ray.py --address=auto --num_ps=2 --num_workers=4

The checkout's form of ``ps-launch-ray`` (installed) and ``python -m ps_toolkit.tools.launch_ray``;
``--help`` lists its flags.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ps_toolkit.tools.launch_ray import main  # noqa: E402

if __name__ == "__main__":
    main()
