"""ps-launch-ray and ps-launch-spark as a newcomer first runs them: the venv's commands, the venv not activated.

Exactly the README's first commands (``.venv/bin/ps-launch-ray --train_steps=500`` and
``.venv/bin/ps-launch-spark --master=local-cluster[3,1,1024] --train_steps=500``), run from the
checkout with PATH holding no virtual environment, no flag the tests add elsewhere (no
--allow_open_ports, no --ray_num_cpus) and no packet-filter rule relied on: every task's port is in the
cluster's private network namespace. Each ends ``launcher: succeeded`` with the chief's accuracy, and no
process the launch started (Ray's daemons, Spark's JVMs and Python workers, the tasks) is left running.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid

import psutil
import pytest

from tests.engine_daemons import describe, unavailable
from tests.taskrun import REPO

# A 500-step default job plus a Ray's or the JVMs' start took 1.5-5 min on 2 cores at load 16; at load 22
# Spark's executors took 6 min to reach the stage's barrier.
LAUNCH_TIMEOUT_SECS = 900
pytestmark = [pytest.mark.slow, pytest.mark.timeout(LAUNCH_TIMEOUT_SECS + 60)]
# Every process a launch starts inherits the launcher's environment: this variable names that launch's.
_MARK = "PS_TOOLKIT_TEST_FIRST_TRY"
_RUN_FOLDER = re.compile(r"^launch_\w+: run folder (\S+)$", re.M)
_VERDICT = re.compile(r"^launcher: succeeded: the chief \(worker:0\) .*eval accuracy (0\.\d+)", re.M)


def _newcomers_env(mark: str) -> dict[str, str]:
    """This environment as a fresh shell has it: no virtual environment on PATH or activated, nothing set
    that the engines' tests set (open ports, the executors' Python)."""
    venv_bin = os.path.dirname(sys.executable)
    path = [folder for folder in os.environ.get("PATH", "").split(os.pathsep) if folder and folder != venv_bin]
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PS_TOOLKIT_", "PYSPARK_"))}
    for key in ("VIRTUAL_ENV", "PYTHONPATH", "RAY_ADDRESS"):
        env.pop(key, None)
    env.update(PATH=os.pathsep.join(path or ["/usr/bin", "/bin"]), **{_MARK: mark})
    return env


def _left_running(mark: str) -> list[str]:
    """The processes still alive that carry ``mark`` in their environment (this launch's descendants)."""
    left = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        try:
            if process.environ().get(_MARK) == mark:
                left.append(f"{process.pid}: {' '.join(process.info['cmdline'] or ())[:200]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return left


def _first_try(command: str, *args: str) -> tuple[subprocess.CompletedProcess, str]:
    """Runs the venv's ``command`` as the README prints it; (its result, its run folder)."""
    argv = [os.path.join(os.path.dirname(sys.executable), command), *args]
    mark = uuid.uuid4().hex
    try:
        done = subprocess.run(
            argv, cwd=REPO, env=_newcomers_env(mark), capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_SECS
        )
    finally:
        left = _left_running(mark)
        for line in left:
            psutil.Process(int(line.split(":")[0])).kill()
    assert not left, f"left running after {command}: {left}"
    folder = _RUN_FOLDER.search(done.stdout)
    assert folder, describe(done)
    return done, folder.group(1)


def _assert_succeeded_sealed(done: subprocess.CompletedProcess, run_folder: str, tasks: list[str]) -> None:
    """Status 0, the chief's accuracy in the verdict, and every task's port kept in the private namespace."""
    try:
        assert done.returncode == 0, describe(done)
        lines = [line for line in done.stdout.splitlines() if line.strip()]
        verdict = _VERDICT.match(lines[-1])
        assert verdict and float(verdict.group(1)) > 0.5, describe(done)
        for task in tasks:
            with open(os.path.join(run_folder, f"{task}.log"), encoding="utf-8", errors="replace") as log:
                text = log.read()
            assert "port in the cluster's private network namespace" in text, f"{task}:\n{text[-3000:]}"
            assert "guarded:" not in text and "open on every interface" not in text, f"{task}:\n{text[-3000:]}"
    finally:
        shutil.rmtree(run_folder, ignore_errors=True)


def test_ps_launch_ray_with_a_ray_of_its_own_succeeds_on_the_first_try():
    try:
        import ray  # noqa: F401
    except ImportError:
        unavailable("Ray", "ray is not installed (pip install -e '.[ray]')")
    done, run_folder = _first_try("ps-launch-ray", "--train_steps=500")
    assert "launch_ray: a Ray of its own with" in done.stdout, describe(done)
    _assert_succeeded_sealed(done, run_folder, ["ps-0", "worker-0", "worker-1"])


def test_ps_launch_spark_on_a_local_cluster_succeeds_on_the_first_try():
    try:
        import pyspark  # noqa: F401
    except ImportError:
        unavailable("Spark", "pyspark is not installed (pip install -e '.[spark]')")
    if shutil.which("java") is None:
        unavailable("Spark", "no java on PATH (apt-get install default-jre-headless)")
    done, run_folder = _first_try("ps-launch-spark", "--master=local-cluster[3,1,1024]", "--train_steps=500")
    _assert_succeeded_sealed(done, run_folder, ["ps-0", "worker-0", "worker-1"])
