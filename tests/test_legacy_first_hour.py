"""A newcomer's legacy run: a hand-run ps says how it will end."""

import os
import selectors
import signal
import subprocess
import sys
import time

import pytest

from ps_toolkit.launch.ports import reserve_ports
from tests.taskrun import REPO

RUN_LEGACY = os.path.join(REPO, "scripts", "run_legacy.py")
ASYNC_EXAMPLE = os.path.join(REPO, "examples", "mnist_softmax_async", "mnist_softmax_async.py")


@pytest.mark.slow
def test_a_hand_run_legacy_ps_says_how_it_will_end():
    with reserve_ports(2) as reservation:
        ps, worker = (f"localhost:{port}" for port in reservation.ports)
        argv = [sys.executable, RUN_LEGACY, ASYNC_EXAMPLE, "--job_name=ps"]
        argv += [f"--ps_hosts={ps}", f"--worker_hosts={worker}"]
        env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
        proc = subprocess.Popen(argv, stderr=subprocess.PIPE, env=env, cwd=REPO, start_new_session=True)
        try:
            hint = _line_with(proc, "scripts/launch_local.py, which stops the ps tasks", timeout=90)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    assert hint.startswith("/job:ps/task:0 serves until it is stopped"), hint


def _line_with(proc, text: str, timeout: float) -> str:
    """The first stderr line containing ``text``, read within ``timeout`` seconds.

    Reads the pipe's descriptor itself: a buffered ``readline`` after ``select`` can
    take several lines at once and leave the one wanted in its buffer, where
    ``select`` never sees it.
    """
    deadline = time.monotonic() + timeout
    fd = proc.stderr.fileno()
    received = b""
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not selector.select(timeout=deadline - time.monotonic()):
                break
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            received += chunk
            for line in received.decode(errors="replace").splitlines():
                if text in line:
                    return line.strip()
    seen = received.decode(errors="replace").splitlines()
    raise AssertionError(f"no line with {text!r} within {timeout}s:\n" + "\n".join(seen[-20:]))
