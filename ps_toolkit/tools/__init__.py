"""The command-line tools: ``ps-run-task``, ``ps-run-legacy``, ``ps-make-slurm-job``, ``ps-make-tfjob``, ...

Each is also ``python -m ps_toolkit.tools.<name>`` and, in a checkout, ``python scripts/<name>.py``.
"""
