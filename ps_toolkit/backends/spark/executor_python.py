"""Which Python the Spark executors run, and the one line a launch ends with when that Python cannot run its task.

PySpark's executors run ``python3`` from their PATH unless told otherwise, which
on a machine with ps_toolkit in a virtual environment is a Python without it.
The launch's executors run the launcher's own interpreter instead, unless the
user chose one (PYSPARK_PYTHON, or ``--spark_conf=spark.pyspark.python=...``).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping

# The configuration key spark-submit reads for the executors' Python; honoured here as the user's choice.
PYTHON_CONF = "spark.pyspark.python"
# What an executor's Python reports when it cannot import the toolkit, or cannot be started at all.
_NO_TOOLKIT = re.compile(r"No module named '(ps_toolkit[\w.]*)'")
_CANNOT_RUN = re.compile(r'Cannot run program "([^"]+)"')


def executor_python(master: str, conf: Mapping[str, str]) -> str:
    """The interpreter the executors of a launch on ``master`` run: PYSPARK_PYTHON, then the
    ``spark.pyspark.python`` of ``conf``, then the launcher's own (``sys.executable``)."""
    del master  # every master's executors get the same rule: local ones share this Python's installation
    return os.environ.get("PYSPARK_PYTHON") or conf.get(PYTHON_CONF) or sys.executable


def missing_toolkit_line(error_text: str, python: str) -> str | None:
    """The one line for a stage whose executors could not run ``python`` or import ps_toolkit in it; None
    for any other failure."""
    advice = (
        "install ps_toolkit for that Python on every executor's host, or set PYSPARK_PYTHON "
        f"(or --spark_conf={PYTHON_CONF}=PATH) to a Python that has it"
    )
    if match := _NO_TOOLKIT.search(error_text):
        return f"the Spark executors' Python ({python}) cannot import {match.group(1)}: {advice}"
    if match := _CANNOT_RUN.search(error_text):
        return f"the Spark executors cannot run their Python ({match.group(1)}): {advice}"
    return None
