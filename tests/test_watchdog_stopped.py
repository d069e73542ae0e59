"""A stopped (SIGSTOP) task's watchdog does not count the time it was stopped."""

import os
import signal
import subprocess
import sys
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHILD = os.path.join(ROOT, "tests", "fixtures", "watchdog_child.py")


def run_stopped(timeout: float, run_secs: float, stopped_secs: float) -> str:
    """Starts the child, stops it for ``stopped_secs`` once ready, continues it; returns its last line."""
    child = subprocess.Popen(
        [sys.executable, CHILD, str(timeout), str(run_secs)],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=ROOT),
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        os.kill(child.pid, signal.SIGSTOP)
        threading.Event().wait(stopped_secs)  # the stall being simulated, not a synchronisation
        os.kill(child.pid, signal.SIGCONT)
        output, _ = child.communicate(timeout=run_secs + timeout + 30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return output.strip().splitlines()[-1]


def test_time_stopped_is_not_counted():
    # Stopped 12 s against a 10 s bound; 5 s of its own time without progress is within it.
    assert run_stopped(timeout=10, run_secs=5, stopped_secs=12) == "survived"


def test_time_running_without_progress_still_is():
    # The control: 5 s of its own time without progress against a 3 s bound fires.
    assert run_stopped(timeout=3, run_secs=5, stopped_secs=0).startswith("fired: ")
