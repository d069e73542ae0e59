"""Writes an sbatch script that runs a parameter-server cluster on Slurm as one srun step.

The checkout's form of ``ps-make-slurm-job`` (installed) and ``python -m ps_toolkit.tools.make_slurm_job``;
``--help`` lists its flags.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ps_toolkit.tools.make_slurm_job import main  # noqa: E402

if __name__ == "__main__":
    main()
