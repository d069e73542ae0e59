"""Runs a parameter-server job on Spark as one barrier stage: one barrier task per TF task.

    python scripts/launch_spark.py --master=spark://HOST:7077 --num_ps=2 --num_workers=4

The checkout's form of ``ps-launch-spark`` (installed) and ``python -m ps_toolkit.tools.launch_spark``;
``--help`` lists its flags.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ps_toolkit.tools.launch_spark import main  # noqa: E402

if __name__ == "__main__":
    main()
