"""An attack on the ports under every default: from another network namespace, a ps's gRPC port gives no connection.

Each test makes two namespaces joined by a bridge (tests/netns_helpers.py):
the cluster runs in the first, on loopback addresses as the README's three
terminals do; the attacker in the second points a tf.compat.v1 session at the
first one's address and the ps's port. Root only (namespaces, iptables).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import sys
import time

import pytest

from ps_toolkit.launch.ports import reserve_ports
from tests import logwatch
from tests.netns_helpers import Namespaces

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_TASK = os.path.join(ROOT, "scripts", "run_task.py")
LAUNCHER = os.path.join(ROOT, "scripts", "launch_local.py")
ATTACK = os.path.join(ROOT, "tests", "fixtures", "attack_client.py")
PORT = 24310  # inside fresh namespaces every port is free
HOSTS = [f"--ps_hosts=localhost:{PORT}", f"--worker_hosts=localhost:{PORT + 1},localhost:{PORT + 2}"]
ENV = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
ENV.pop("PS_TOOLKIT_ALLOW_OPEN_PORTS", None)  # the suite's own clusters' setting (conftest.py): these test the defaults

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def spaces():
    if os.geteuid() != 0:
        pytest.skip("network namespaces and packet filters need root")
    made = Namespaces(2).create()
    try:
        yield made
    finally:
        made.remove()


def connects(spaces, index: int, host: str, port: int) -> bool:
    """Whether a plain TCP connect from namespace ``index`` succeeds within 3 s."""
    probe = f"import socket; socket.create_connection(({host!r}, {port}), timeout=3).close()"
    done = subprocess.run(spaces.command(index, sys.executable, "-c", probe), capture_output=True, timeout=30)
    return done.returncode == 0


class Attacker:
    """The tf.compat.v1 client in the second namespace, aimed at the first's ps port.

    It imports TensorFlow as soon as it is made, beside the cluster's own start,
    and attacks only when ``verdict()`` is asked: the cluster does not train
    through the attacker's import. Killed on leaving the ``with`` block.
    """

    def __init__(self, spaces, *extra: str):
        argv = spaces.command(1, sys.executable, ATTACK, f"{spaces.addresses[0]}:{PORT}", *extra)
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=ENV,
            start_new_session=True,
        )
        self._read = b""

    def __enter__(self) -> Attacker:
        return self

    def __exit__(self, *exc) -> None:
        self._end()

    def _end(self) -> str:
        """Kills the client if it still runs; what it wrote to stderr (its tail)."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # it may end on its own meanwhile
                os.killpg(self.process.pid, signal.SIGKILL)
        _, errors = self.process.communicate(timeout=30)
        return (errors or b"").decode(errors="replace")[-3000:]

    def wait_ready(self, timeout: float = 120) -> None:
        """Returns once the client has imported TensorFlow and built its graph (it printed READY)."""
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            while b"READY\n" not in self._read:
                left = deadline - time.monotonic()
                if left <= 0:
                    pytest.fail(f"the attack client was not ready within {timeout}s:\n{self._end()}")
                if selector.select(timeout=left):
                    chunk = os.read(self.process.stdout.fileno(), 4096)
                    if not chunk:
                        pytest.fail(f"the attack client ended before it was ready:\n{self._end()}")
                    self._read += chunk

    def verdict(self) -> str:
        """Attacks now; the client's verdict: CONNECTED or NO CONNECTION (...)."""
        self.wait_ready()
        output, errors = self.process.communicate(b"go\n", timeout=120)
        lines = [line for line in (self._read + output).decode().splitlines() if line.strip()]
        assert lines[-1] != "READY", errors.decode(errors="replace")[-3000:]
        return lines[-1]


def guard_rules(spaces) -> list[str]:
    listing = subprocess.run(spaces.command(0, "iptables", "-S", "INPUT"), capture_output=True, text=True, timeout=20)
    marks = (f'"ps_toolkit port {PORT}"', f'"ps_toolkit port {PORT} owner ')
    return [line for line in listing.stdout.splitlines() if any(mark in line for mark in marks)]


def start(spaces, argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        spaces.command(0, *argv),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=ENV,
        cwd=ROOT,
        start_new_session=True,
    )


def stop(process: subprocess.Popen, sig=signal.SIGTERM) -> str:
    if process.poll() is None:
        os.killpg(process.pid, sig)
    try:
        output, _ = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate(timeout=30)
    return output or ""


def ps_command(*extra: str) -> list[str]:
    return [sys.executable, RUN_TASK, "--job_name=ps", *HOSTS, "--checkpoint_dir=/nonexistent-unused", *extra]


def listening_in_namespace_of(pid: int, port: int) -> bool:
    """Whether anything listens on ``port`` in ``pid``'s network namespace (its /proc/PID/net/tcp{,6})."""
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}", encoding="ascii") as handle:
                rows = [row.split() for row in handle.read().splitlines()[1:]]
        except OSError:
            return False
        if any(row[1].endswith(f":{port:04X}") and row[3] == "0A" for row in rows):
            return True
    return False


@pytest.mark.parametrize("allow_open_ports", [False, True], ids=["default", "allow_open_ports"])
def test_standalone_ps_answers_loopback_only(spaces, allow_open_ports):
    """By default a loopback cluster's ps serves in the cluster's own namespace: not even the first
    namespace's loopback reaches it, and no rule is needed."""
    with Attacker(spaces) as attacker:
        ps = start(spaces, ps_command(*(["--allow_open_ports"] if allow_open_ports else [])))
        try:
            logwatch.wait_until(lambda: listening_in_namespace_of(ps.pid, PORT), 120, "the ps listening")
            verdict = attacker.verdict()
            assert not guard_rules(spaces)
            if allow_open_ports:
                # The control: told the network is private, the port is open, and the attack connects.
                assert verdict == "CONNECTED", verdict
            else:
                assert verdict.startswith("NO CONNECTION"), verdict
                assert not connects(spaces, 0, "127.0.0.1", PORT)
        finally:
            stop(ps, signal.SIGKILL)


def test_multi_host_cluster_admits_its_hosts_only(spaces):
    """A ps whose cluster names the first namespace's peer admits it, and nobody else."""
    hosts = [f"--ps_hosts={spaces.addresses[0]}:{PORT}", f"--worker_hosts=10.213.0.250:{PORT + 1}"]
    ps = start(spaces, [sys.executable, RUN_TASK, "--job_name=ps", *hosts, "--checkpoint_dir=/nonexistent-unused"])
    try:
        logwatch.wait_until(lambda: connects(spaces, 0, spaces.addresses[0], PORT), 120, "the ps listening")
        rules = guard_rules(spaces)
        assert any("-s 10.213.0.250/32" in r and "ACCEPT" in r for r in rules), rules
        assert any("DROP" in r for r in rules), rules
        assert not connects(spaces, 1, spaces.addresses[0], PORT)
    finally:
        output = stop(ps)
    logwatch.wait_until(lambda: not guard_rules(spaces), 20, "the rules removed", lambda: output[-3000:])


def test_stale_rules_of_a_killed_guardian_are_replaced(spaces):
    """Rules left by a guardian that was itself SIGKILLed go when the next task on the port starts."""
    stale = ["-p", "tcp", "--dport", str(PORT), "-m", "comment", "--comment", f"ps_toolkit port {PORT}", "-j", "DROP"]
    for _ in range(2):
        subprocess.run(spaces.command(0, "iptables", "-I", "INPUT", *stale), check=True, timeout=20)
    assert len(guard_rules(spaces)) == 2
    script = (
        # port_guard.py alone (standard library only), without the package's imports.
        f"import subprocess, sys; sys.path.insert(0, {os.path.join(ROOT, 'ps_toolkit', 'network')!r});"
        "import port_guard;"
        f"g = port_guard.PortGuard.start({PORT}, ['localhost']);"
        "rules = subprocess.run(['iptables', '-S', 'INPUT'], capture_output=True, text=True).stdout;"
        f"print(rules.count('ps_toolkit port {PORT}'));"
        "g.release()"
    )
    done = subprocess.run(
        spaces.command(0, sys.executable, "-c", script), capture_output=True, text=True, timeout=60, env=ENV
    )
    assert done.stdout.strip() == "1", done.stdout + done.stderr
    assert not guard_rules(spaces)


def test_where_no_rules_can_be_installed_the_task_refuses_in_one_line(tmp_path):
    """A cluster with a real host, no iptables on PATH (or not root): exit 2, one line that names the way out."""
    env = dict(ENV, PATH=str(tmp_path))
    env.pop("PS_TOOLKIT_ALLOW_OPEN_PORTS", None)
    # This task runs on the host, beside the suite's other launches: its ports are reserved.
    reservation = reserve_ports(3)
    try:
        ps, *workers = reservation.ports
        # A real host in the cluster: no private namespace can hold it, only rules could guard the port.
        hosts = [f"--ps_hosts=localhost:{ps}", f"--worker_hosts=localhost:{workers[0]},10.213.0.250:{workers[1]}"]
        argv = [sys.executable, RUN_TASK, "--job_name=ps", *hosts, f"--checkpoint_dir={tmp_path}/c"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    finally:
        reservation.release()
    assert done.returncode == 2, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if "run_task.py: error:" in line]
    assert len(errors) == 1, done.stderr
    assert "--allow_open_ports" in errors[0] and f"port {ps}" in errors[0], errors[0]
    assert ("iptables is not installed" if os.geteuid() == 0 else "not root") in errors[0], errors[0]
    assert "Traceback" not in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["auto", "none"])
def test_launch_local_defaults_give_no_connection(spaces, isolation, tmp_path):
    os.chmod(tmp_path, 0o755)
    argv = [sys.executable, LAUNCHER, *HOSTS, "--train_steps=10000000", f"--log_dir={tmp_path}", "--quiet", "--nochart"]
    with Attacker(spaces) as attacker:
        launcher = start(spaces, argv + ([f"--isolation={isolation}"] if isolation != "auto" else []))
        try:
            log = tmp_path / "worker-0.log"
            logwatch.wait_until(lambda: log.exists() and logwatch.progress(str(log)), 240, "training progress")
            assert attacker.verdict().startswith("NO CONNECTION")
            # Without the launcher's namespace the tasks make their loopback cluster's own: no rule either.
            assert not guard_rules(spaces)
            assert not connects(spaces, 0, "127.0.0.1", PORT)
        finally:
            stop(launcher)


@pytest.mark.slow
def test_a_tampered_global_step_stops_the_chief_with_status_2(spaces, tmp_path):
    """With the ports told open, the attack's AssignVariableOp reaches the step; the chief refuses it."""
    os.chmod(tmp_path, 0o755)
    argv = [sys.executable, LAUNCHER, *HOSTS, "--isolation=none", "--allow_open_ports", "--train_steps=150000"]
    with Attacker(spaces, f"--set_global_step={10**9}") as attacker:
        launcher = start(spaces, argv + [f"--log_dir={tmp_path}", "--quiet", "--nochart", "--steps_per_run=1"])
        try:
            log = tmp_path / "worker-0.log"
            logwatch.wait_until(lambda: log.exists() and logwatch.progress(str(log)), 240, "training progress")
            assert attacker.verdict() == "CONNECTED"
            logwatch.wait_until(lambda: launcher.poll() is not None, 120, "the launcher to end")
        finally:
            output = stop(launcher)
    assert launcher.returncode == 2, output[-3000:]
    chief_log = log.read_text()
    refusals = [line for line in chief_log.splitlines() if "run_task.py: error:" in line]
    assert len(refusals) == 1 and "the global step is 100000000" in refusals[0] and "tampered" in refusals[0], (
        chief_log[-3000:]
    )
    assert not any("100000" in name for name in os.listdir(tmp_path / "checkpoints")), os.listdir(tmp_path)


def test_a_user_command_without_a_private_namespace_needs_allow_open_ports(tmp_path):
    """launch_local.py cannot guard ports a user's command binds itself: exit 2 unless told they may be open."""
    env = dict(ENV)
    env.pop("PS_TOOLKIT_ALLOW_OPEN_PORTS", None)
    argv = [
        sys.executable,
        LAUNCHER,
        "--isolation=none",
        f"--log_dir={tmp_path}",
        "--num_ps=0",
        "--num_workers=1",
        "--nochart",
    ]
    command = ["--", sys.executable, "-c", "print('global_step: 1')"]  # a step taken: the verdict's evidence
    refused = subprocess.run(argv + command, capture_output=True, text=True, timeout=60, env=env)
    assert refused.returncode == 2, refused.stderr[-3000:]
    lines = [line for line in refused.stderr.splitlines() if line.startswith("launch_local.py: ")]
    assert len(lines) == 1 and "--allow_open_ports" in lines[0], refused.stderr[-3000:]
    allowed = subprocess.run(
        argv + ["--allow_open_ports", *command], capture_output=True, text=True, timeout=60, env=env
    )
    assert allowed.returncode == 0, allowed.stdout[-3000:] + allowed.stderr[-3000:]
