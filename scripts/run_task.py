"""Runs one task of a parameter-server cluster: a ps, a worker, the chief or the evaluator.

The checkout's form of ``ps-run-task`` (installed) and ``python -m ps_toolkit.tools.run_task``;
``--help`` lists its flags.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ps_toolkit.tools.run_task import main  # noqa: E402

if __name__ == "__main__":
    main()
