"""A newcomer's legacy runs: a missing data dir is one line, a hand-run ps says how it will end."""

import json
import os
import selectors
import signal
import subprocess
import sys
import time

import pytest

from ps_toolkit.launch.ports import reserve_ports
from tests.taskrun import REPO, python_command, run_tasks

RUN_LEGACY = os.path.join(REPO, "scripts", "run_legacy.py")
EXAMPLES = os.path.join(REPO, "scripts", "examples")


# The examples that read a --data_dir; taxifare_train_and_evaluate.py writes its data set where it runs.
DATA_DIR_EXAMPLES = sorted(n for n in os.listdir(EXAMPLES) if n.endswith(".py") and not n.startswith("taxifare"))


@pytest.mark.parametrize("script", DATA_DIR_EXAMPLES)
def test_an_example_with_a_missing_data_dir_says_so_in_one_line(script, tmp_path):
    args = [os.path.join(EXAMPLES, script), "--job_name=worker", f"--data_dir={tmp_path}/nope"]
    env = {}
    if "train_and_evaluate" in script:  # an Estimator task: its cluster comes from TF_CONFIG
        args.append(f"--model_dir={tmp_path}/m")
        with reserve_ports(2) as reservation:
            chief, ps = (f"localhost:{port}" for port in reservation.ports)
        cluster = {"chief": [chief], "ps": [ps]}
        env["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": "chief", "index": 0}})
    outcome = run_tasks({script: python_command(RUN_LEGACY, *args)}, timeout=120, env=env)[script]
    detail = outcome.describe()
    assert outcome.returncode == 2, detail
    assert "Traceback" not in outcome.stderr, detail
    errors = [line for line in outcome.stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1 and f"{tmp_path}/nope" in errors[0], detail


@pytest.mark.slow
def test_a_hand_run_legacy_ps_says_how_it_will_end():
    with reserve_ports(2) as reservation:
        ps, worker = (f"localhost:{port}" for port in reservation.ports)
        reservation.release()
        argv = [sys.executable, RUN_LEGACY, os.path.join(EXAMPLES, "mnist_softmax_async.py"), "--job_name=ps"]
        argv += [f"--ps_hosts={ps}", f"--worker_hosts={worker}"]
        env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
        proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO, start_new_session=True)
        try:
            hint = _line_with(proc, "scripts/launch_local.py, which stops the ps tasks", timeout=90)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    assert hint.startswith("/job:ps/task:0 serves until it is stopped"), hint


def _line_with(proc, text: str, timeout: float) -> str:
    """The first stderr line containing ``text``, read within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    seen = []
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stderr, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not selector.select(timeout=deadline - time.monotonic()):
                break
            line = proc.stderr.readline()
            if not line:
                break
            seen.append(line)
            if text in line:
                return line.strip()
    raise AssertionError(f"no line with {text!r} within {timeout}s:\n{''.join(seen[-20:])}")
