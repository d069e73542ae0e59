"""Benchmarks ps_toolkit against a raw TF1 between-graph script, TF2's ParameterServerStrategy and one process.

The benchmark lives beside the tests (``benchmarks/``), not in the wheel; ``--help`` lists its flags.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.cli import main  # noqa: E402

if __name__ == "__main__":
    main()
