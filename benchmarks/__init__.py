"""The performance benchmark: reference systems, a bounded cluster runner, measurements, reports.

It lives beside the tests, not in the wheel: run it from a checkout (``python scripts/benchmark.py``).
"""

import os

# The folder holding this package: tasks the benchmark starts import ``benchmarks.*`` from it.
CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
