"""CPU burners beside a benchmark: load the machine on purpose, so a run's end can be measured under load.

``--load_procs=N`` (benchmarks/cli.py) starts N processes that each spin one core
for as long as the benchmark runs; the benchmark owns them and ends every one
before it returns, whatever happens (SIGTERM, then SIGKILL after a bound).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys

# A burner spins in pure Python: one core each, no memory to speak of.
_SPIN = "while True: pass"
# The bound on a burner's exit after SIGTERM, then after SIGKILL.
_END_SECS = 5.0


class CpuLoad(contextlib.AbstractContextManager):
    """``procs`` CPU burners, started on entry and ended on exit; ``procs=0`` starts none."""

    def __init__(self, procs: int):
        if procs < 0:
            raise ValueError(f"load_procs={procs}: must be 0 or more")
        self.procs = procs
        self._burners: list[subprocess.Popen] = []

    def __enter__(self) -> CpuLoad:
        try:
            for _ in range(self.procs):
                self._burners.append(subprocess.Popen([sys.executable, "-c", _SPIN], stdin=subprocess.DEVNULL))
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def pids(self) -> list[int]:
        return [burner.pid for burner in self._burners]

    def close(self) -> None:
        """Ends every burner: SIGTERM, and SIGKILL for one still alive after the bound; each is reaped."""
        for burner in self._burners:
            if burner.poll() is None:
                burner.terminate()
        for burner in self._burners:
            try:
                burner.wait(timeout=_END_SECS)
            except subprocess.TimeoutExpired:
                burner.kill()
                burner.wait(timeout=_END_SECS)
        self._burners = []
