"""Every entry point gets the one task start-up: its port private, its role in its command line, Ctrl-C clean.

For each way of starting a ps (``run_task.py``, an old script's Server under
``run_legacy.py``, ``ps_toolkit.train`` with TF_CONFIG, a launcher's task), as
whichever user runs the suite, root or not and with or without iptables:

- the ps serves in a network namespace other than the test's, and from the
  test's namespace the foreign client (tests/fixtures/attack_client.py: a
  tf.compat.v1 session filtered to /job:ps/task:0 running tf.io.read_file)
  gets no connection, while the same client inside the ps's namespace does
  (the control: the attack itself works);
- ``pgrep -f job_name=ps`` finds it, its command line starting ``ps_toolkit ps:0``;
- Ctrl-C (SIGINT) ends a hand-started ps with one line, no traceback, exit 130,
  and its namespace's keeper ends with it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys

import psutil
import pytest

from ps_toolkit.launch.ports import reserve_ports
from ps_toolkit.network import cluster_netns
from tests import logwatch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_TASK = os.path.join(ROOT, "scripts", "run_task.py")
RUN_LEGACY = os.path.join(ROOT, "scripts", "run_legacy.py")
LAUNCHER = os.path.join(ROOT, "scripts", "launch_local.py")
ATTACK = os.path.join(ROOT, "tests", "fixtures", "attack_client.py")
TEXTBOOK = os.path.join(ROOT, "tests", "fixtures", "textbook_ps_join.py")
API_TASK = os.path.join(ROOT, "tests", "fixtures", "api_task.py")

pytestmark = pytest.mark.timeout(300)


def task_env(**extra: str) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    # The suite's default (conftest.py) where no rules can be installed; these tests check the defaults.
    for name in ("PS_TOOLKIT_ALLOW_OPEN_PORTS", "PS_TOOLKIT_PRIVATE_NETWORK", "TF_CONFIG"):
        env.pop(name, None)
    return {**env, **extra}


@pytest.fixture
def ports():
    reservation = reserve_ports(3)
    try:
        yield reservation.ports
    finally:
        reservation.release()


def listening(pid: int, port: int) -> bool:
    """Whether anything listens on ``port`` in ``pid``'s network namespace (its /proc/PID/net/tcp{,6})."""
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}", encoding="ascii") as handle:
                rows = handle.read().splitlines()[1:]
        except OSError:
            return False
        if any(row.split()[1].endswith(f":{port:04X}") and row.split()[3] == "0A" for row in rows):
            return True
    return False


def other_namespace(pid: int) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net")
    except OSError:
        return False


def attack(port: int, inside_pid: int | None = None) -> str:
    """The foreign client's verdict against 127.0.0.1:port, from here or inside ``inside_pid``'s namespaces."""
    command = [sys.executable, ATTACK, f"127.0.0.1:{port}"]
    if inside_pid is not None:
        spaces = ["--net"]
        if os.readlink(f"/proc/{inside_pid}/ns/user") != os.readlink("/proc/self/ns/user"):
            spaces = ["--user", "--preserve-credentials", *spaces]
        command = ["nsenter", f"--target={inside_pid}", *spaces, *command]
    done = subprocess.run(command, input="go\n", capture_output=True, text=True, timeout=180, env=task_env())
    lines = [line for line in done.stdout.splitlines() if line.strip() and line != "READY"]
    assert lines, done.stderr[-3000:]
    return lines[-1]


def ps_found_by_pgrep(marker: str) -> int:
    """The pid ``pgrep -f job_name=ps`` finds among the processes whose command line holds ``marker``."""
    found = subprocess.run(["pgrep", "-f", "job_name=ps"], capture_output=True, text=True, timeout=20).stdout.split()
    for pid in map(int, found):
        with contextlib.suppress(psutil.Error):
            if marker in " ".join(psutil.Process(pid).cmdline()):
                return pid
    return 0


@contextlib.contextmanager
def started(argv: list[str], env: dict, log_path):
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT, start_new_session=True
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=60)


def check_sealed_and_titled(process, port: int, log_path, *, control: bool = False, marker: str = "") -> None:
    describe = lambda: log_path.read_text()[-3000:]  # noqa: E731
    logwatch.wait_until(lambda: listening(process.pid, port) or process.poll() is not None, 180, "the ps", describe)
    assert process.poll() is None, describe()
    assert other_namespace(process.pid), "the ps serves in the test's own network namespace"
    assert not listening(os.getpid(), port), "the ps's port is open in the test's namespace"
    assert ps_found_by_pgrep(marker or f":{port}") == process.pid
    assert " ".join(psutil.Process(process.pid).cmdline()).startswith("ps_toolkit ps:0 ")
    assert attack(port).startswith("NO CONNECTION")
    if control and shutil.which("nsenter"):
        assert attack(port, inside_pid=process.pid) == "CONNECTED"


def keepers(ports) -> list[psutil.Process]:
    """The running keepers of this cluster's namespace (their command line names its socket)."""
    key = cluster_netns.cluster_key([f"127.0.0.1:{p}" for p in ports])
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if any(f"{key}.sock" in arg for arg in process.info["cmdline"] or ()):
            found.append(process)
    return found


def check_ctrl_c(process, log_path, ports) -> None:
    assert len(keepers(ports)) == 1
    os.kill(process.pid, signal.SIGINT)
    assert process.wait(timeout=60) == 130, log_path.read_text()[-3000:]
    text = log_path.read_text()
    assert "Traceback" not in text, text[-3000:]
    assert sum("interrupted (Ctrl-C); exiting" in line for line in text.splitlines()) == 1, text[-3000:]
    logwatch.wait_until(lambda: not keepers(ports), 30, "the namespace's keeper to end with its last task")


def hosts(ports) -> list[str]:
    return [f"--ps_hosts=127.0.0.1:{ports[0]}", f"--worker_hosts=127.0.0.1:{ports[1]},127.0.0.1:{ports[2]}"]


@pytest.mark.slow
def test_run_task_ps(ports, tmp_path):
    argv = [sys.executable, RUN_TASK, "--job_name=ps", "--task_index=0", *hosts(ports), f"--checkpoint_dir={tmp_path}"]
    with started(argv, task_env(), tmp_path / "ps.log") as ps:
        check_sealed_and_titled(ps, ports[0], tmp_path / "ps.log", control=True)
        check_ctrl_c(ps, tmp_path / "ps.log", ports)


@pytest.mark.slow
def test_run_legacy_ps_that_joins(ports, tmp_path):
    argv = [sys.executable, RUN_LEGACY, TEXTBOOK, "--job_name=ps", "--task_index=0", *hosts(ports)]
    with started(argv, task_env(), tmp_path / "ps.log") as ps:
        check_sealed_and_titled(ps, ports[0], tmp_path / "ps.log")
        check_ctrl_c(ps, tmp_path / "ps.log", ports)


@pytest.mark.slow
def test_train_api_ps_with_tf_config(ports, tmp_path):
    cluster = {"ps": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{p}" for p in ports[1:]]}
    env = task_env(TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "ps", "index": 0}}))
    # A marker pgrep -f can see: the program's own arguments, after the title.
    argv = [sys.executable, API_TASK, str(tmp_path / "ckpt"), "job_name=ps"]
    with started(argv, env, tmp_path / "ps.log") as ps:
        check_sealed_and_titled(ps, ports[0], tmp_path / "ps.log", marker=str(tmp_path))
        # Re-executed inside the namespace (TensorFlow's threads): the program ran twice, in one process.
        assert (tmp_path / "ps.log").read_text().count("api_task.py started") == 2


@pytest.mark.slow
def test_launcher_task(ports, tmp_path):
    os.chmod(tmp_path, 0o755)
    argv = [sys.executable, LAUNCHER, *hosts(ports), "--train_steps=100000000", f"--log_dir={tmp_path}"]
    with started([*argv, "--quiet", "--nochart"], task_env(), tmp_path / "launcher.log") as launcher:
        describe = lambda: (tmp_path / "launcher.log").read_text()[-3000:]  # noqa: E731
        ps_pid = logwatch.wait_until(lambda: ps_found_by_pgrep(f":{ports[0]}"), 180, "the ps's pid", describe)
        logwatch.wait_until(lambda: listening(ps_pid, ports[0]), 180, "the ps listening", describe)
        assert other_namespace(ps_pid)
        assert " ".join(psutil.Process(ps_pid).cmdline()).startswith("ps_toolkit ps:0 ")
        assert attack(ports[0]).startswith("NO CONNECTION")
        pids = json.loads((tmp_path / "pids.json").read_text())
        assert pids["ps:0"] == ps_pid, pids
        os.killpg(launcher.pid, signal.SIGTERM)
        launcher.wait(timeout=120)


def test_without_namespaces_or_rules_a_loopback_task_refuses_naming_both(ports, tmp_path):
    """No network namespace can be made (the limit set to 0) and no rules installed: exit 2, one line
    saying what is missing and how to enable it."""
    if shutil.which("unshare") is None:
        pytest.skip("util-linux 'unshare' is not installed")
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"user namespaces are not available here: {probe.stderr.strip()}")
    limit = 'echo 0 > /proc/sys/user/max_net_namespaces && exec "$@"'
    wrapper = [shutil.which("unshare"), "--user", "--map-root-user", "/bin/sh", "-c", limit, "sh"]
    argv = [sys.executable, RUN_TASK, "--job_name=ps", *hosts(ports), f"--checkpoint_dir={tmp_path}/c"]
    # TMPDIR: the mapped user's own state folder; PATH without iptables: no rules either.
    env = task_env(TMPDIR=str(tmp_path), PATH=os.path.dirname(sys.executable))
    done = subprocess.run([*wrapper, *argv], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 2, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if "run_task.py: error:" in line]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "no private network namespace either" in errors[0] and "sysctl" in errors[0], errors[0]
    assert "--allow_open_ports" in errors[0], errors[0]
