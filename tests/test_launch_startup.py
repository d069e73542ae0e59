"""The launcher's start-up: its fork server started right after parsing, the chart's warm-up, the fast exit."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from ps_toolkit.launch import task_plan
from ps_toolkit.network import netns
from ps_toolkit.process import fork_client, fork_starter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCHER = os.path.join(ROOT, "scripts", "launch_local.py")
BOUND_SECS = 60
# A close bound no launch start-up reaches, in the test that must not wait for its server.
WAIT_SECS = 120

pytestmark = pytest.mark.timeout(300)


def _starts_a_server_after_parsing(args: list[str], cwd) -> bool:
    """Whether launch_local's flag parser, given ``args``, starts the launch's fork server (recorded, not run)."""
    code = (
        "import sys\n"
        "from ps_toolkit.process import fork_starter\n"
        "from ps_toolkit.tools import launch_local\n"
        "started = []\n"
        "fork_starter.shared_server = lambda env, *rest, **kw: started.append(env)\n"
        "launch_local._parse(['launch_local.py', *sys.argv[1:]])\n"
        "print(len(started))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=BOUND_SECS, cwd=cwd
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip() == "1"


@pytest.mark.parametrize(
    ("args", "forks"),
    [
        ([], True),
        (["--start_method=exec"], False),
        (["--start_method=exec", "--start_method=fork"], True),
        (["--flagfile=exec.cfg"], False),
        (["--backend=ray"], False),
        (["--", sys.executable, "my_script.py"], False),
        (["--log_dir=--start_method=exec"], True),
    ],
)
def test_the_launcher_starts_its_fork_server_right_after_parsing_when_its_tasks_are_forked(args, forks, tmp_path):
    (tmp_path / "exec.cfg").write_text("--start_method=exec\n")
    assert _starts_a_server_after_parsing(args, tmp_path) is forks


def test_the_server_started_early_is_the_one_the_tasks_are_forked_from(own_fork_server, monkeypatch):
    started = []

    class Recorder:
        refusal = None
        alive = True

        def __init__(self, env, preload=()):
            started.append(dict(env))

        def close(self):
            pass

    monkeypatch.setattr(fork_starter, "ForkServer", Recorder)
    monkeypatch.setattr(fork_starter, "_SHARED", {})
    early = fork_starter.shared_server(task_plan.task_env())  # what launch_local.py does after parsing
    # What the launcher does later: the isolation's variable added, TF_CONFIG per task.
    base_env = task_plan.task_env({netns.PRIVATE_NETWORK_ENV: "1"})
    jobs = task_plan.Topology(num_ps=1, num_workers=2).jobs_for_ports([1, 2, 3])
    plans = task_plan.plan_tasks(jobs, task_plan.default_command([]), base_env=base_env)
    assert all(fork_starter.shared_server(plan.env) is early for plan in plans)
    assert len(started) == 1


def test_a_launch_that_fails_its_checks_ends_its_early_server_at_once(own_fork_server, tmp_path):
    """The server is killed mid-import, not waited for: here its TensorFlow import never ends."""
    (tmp_path / "tensorflow").mkdir()
    (tmp_path / "tensorflow" / "__init__.py").write_text("import signal\n\nsignal.pause()\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), ROOT]))
    # The launcher with a 120 s bound on waiting for its server: waiting would show, however
    # loaded the machine, beside the launcher's own seconds of start-up.
    wrapped = (
        "import runpy, sys; from ps_toolkit.process import fork_client; "
        f"fork_client._CLOSE_TIMEOUT_SECS = {WAIT_SECS}; sys.argv[0] = {LAUNCHER!r}; "
        f"runpy.run_path({LAUNCHER!r}, run_name='__main__')"
    )
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", wrapped, "--num_workers=0", f"--log_dir={tmp_path / 'run'}"],
        capture_output=True,
        text=True,
        timeout=BOUND_SECS,
        cwd=ROOT,
        env=env,
    )
    seconds = time.monotonic() - started
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "--num_workers" in done.stderr, done.stderr
    # Waiting for the server would take its close bound, after which it is killed anyway.
    assert seconds < WAIT_SECS / 2, seconds


def test_closing_a_server_before_any_task_kills_it_during_its_imports():
    server = fork_client.ForkServer(task_plan.task_env())
    started = time.monotonic()
    server.close()
    assert time.monotonic() - started < 2.0
    assert server._process.returncode == -9  # killed: it had not finished importing


def _chart_bytes(tmp_path, warm: bool) -> bytes:
    path = tmp_path / f"chart-{warm}.png"
    code = (
        "import sys\n"
        "from ps_toolkit.launch import charts\n"
        "if sys.argv[2] == 'warm':\n"
        "    charts.warm_up()\n"
        "records = [{'time': 10.0 + i, 'loss': 1.0 / (i + 1), 'steps_per_sec': 100.0 + i} for i in range(20)]\n"
        "assert charts.write_progress_chart({'worker:0': records, 'worker:1': records[::2]}, sys.argv[1])\n"
        "assert charts._warm_up is None or not charts._warm_up.is_alive()\n"
    )
    env = dict(os.environ, PYTHONPATH=ROOT)
    args = [sys.executable, "-c", code, str(path), "warm" if warm else "cold"]
    subprocess.run(args, check=True, timeout=BOUND_SECS, env=env, cwd=ROOT)
    return path.read_bytes()


def test_a_chart_drawn_after_the_warm_up_is_the_chart_drawn_without_it(tmp_path):
    assert _chart_bytes(tmp_path, warm=True) == _chart_bytes(tmp_path, warm=False)
