"""Benchmarks ps_toolkit against a raw TF1 between-graph script, TF2's ParameterServerStrategy and one process.

The checkout's form of ``ps-benchmark`` (installed) and ``python -m ps_toolkit.tools.benchmark``;
``--help`` lists its flags.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ps_toolkit.tools.benchmark import main  # noqa: E402

if __name__ == "__main__":
    main()
