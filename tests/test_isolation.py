"""scripts/launch_local.py --isolation: the tasks' ports answer inside the launch's private network only.

The fast tests run tests/fixtures/listening_task.py as every task: it listens
on its port on every interface (as TensorFlow does), answers with a token
unique to the test, checks it reaches its peers, and reports to a Unix socket
of the test's (a path, so it crosses network namespaces) until the test lets
it end.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from tests import logwatch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCHER = os.path.join(ROOT, "scripts", "launch_local.py")
LISTENING_TASK = os.path.join(ROOT, "tests", "fixtures", "listening_task.py")
# How the launcher runs the listening task; tests/test_isolation_fork.py runs it through
# scripts/run_legacy.py, which the launcher forks from its fork server.
TASK_COMMAND = [sys.executable, LISTENING_TASK]
TASKS = ("ps:0", "worker:0", "worker:1")
# Root gets a private network namespace; any other user a private user + network namespace.
PRIVATE_NAMESPACE_LINE = re.compile(r"the tasks run in a private (user \+ )?network namespace")
REPORT_TIMEOUT_SECS = 60
OWN_NETNS = os.readlink("/proc/self/ns/net")

pytestmark = pytest.mark.timeout(180)


def skip_unless_root(reason: str) -> None:
    """Without root the kernel may refuse a namespace; as root (CI) isolation must work."""
    if os.geteuid() == 0:
        pytest.fail(f"isolation must work as root, but: {reason}")
    pytest.skip(reason)


class Control:
    """The test's end of the tasks' Unix socket: collects their reports, closes it to let them end."""

    def __init__(self):
        # A short folder of its own: Unix socket paths are limited to 107 bytes.
        self.folder = tempfile.mkdtemp(prefix="pstk_iso_")
        self.path = os.path.join(self.folder, "control.sock")
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.path)
        self._server.listen(16)
        self._changed = threading.Condition()
        self._connections: list[socket.socket] = []
        self.reports: list[dict] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._server.accept()
            except OSError:  # closed by release()
                return
            line = connection.makefile("rb").readline()
            with self._changed:
                self._connections.append(connection)
                if line:
                    self.reports.append(json.loads(line))
                self._changed.notify_all()

    def wait(self, condition, timeout: float, what: str, describe=lambda: "") -> list[dict]:
        """Blocks until ``condition(reports)`` holds; returns the reports."""
        with self._changed:
            if not self._changed.wait_for(lambda: condition(self.reports), timeout):
                raise AssertionError(
                    f"timed out after {timeout}s waiting for {what}; reports: {self.reports}\n{describe()}"
                )
            return list(self.reports)

    def latest(self) -> dict[str, dict]:
        """The newest report of each task."""
        with self._changed:
            return {report["task"]: report for report in self.reports}

    def release(self) -> None:
        """Ends every task that reported (and refuses any later one)."""
        self._server.close()
        with self._changed:
            for connection in self._connections:
                connection.close()
        shutil.rmtree(self.folder, ignore_errors=True)


class Launch:
    """scripts/launch_local.py running listening tasks; killed in cleanup whatever happens."""

    def __init__(self, tmp_path, *launcher_flags: str, wrapper=(), env=None):
        self.control = Control()
        self.token = secrets.token_hex(8)
        self.out, self.err = tmp_path / "launcher.out", tmp_path / "launcher.err"
        command = [*TASK_COMMAND, f"--control={self.control.path}", f"--token={self.token}"]
        argv = [
            *wrapper,
            sys.executable,
            LAUNCHER,
            f"--log_dir={tmp_path}/run",
            "--quiet",
            "--nochart",
            "--stop_grace_secs=2",
            *launcher_flags,
            "--",
            *command,
        ]
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.popen = subprocess.Popen(argv, stdout=out, stderr=err, cwd=ROOT, env=env, start_new_session=True)

    def describe(self) -> str:
        return f"launcher stdout:\n{self.out.read_text()[-3000:]}\nlauncher stderr:\n{self.err.read_text()[-3000:]}"

    def wait_reports(self, condition=lambda latest: set(TASKS) <= set(latest)) -> dict[str, dict]:
        """The newest report of each task once ``condition`` holds; skips the test when --isolation=netns cannot be."""

        def ready(_reports):
            if self.popen.poll() is not None:
                return True
            return condition(self.control.latest())

        self.control.wait(ready, REPORT_TIMEOUT_SECS, "the tasks' reports", self.describe)
        if self.popen.returncode == 2 and "cannot isolate" in self.err.read_text():
            skip_unless_root(self.err.read_text().strip())
        assert self.popen.returncode is None, self.describe()
        return self.control.latest()

    def finish(self, timeout: float = 60) -> int:
        """Lets the tasks end and returns the launcher's exit status."""
        self.control.release()
        return self.popen.wait(timeout=timeout)

    def cleanup(self) -> None:
        self.control.release()
        if self.popen.poll() is None:
            self.popen.kill()  # its tasks die with it (PR_SET_PDEATHSIG)
            self.popen.wait(timeout=30)


@pytest.fixture
def launch(tmp_path):
    started = []

    def start(*launcher_flags, **kwargs):
        folder = tmp_path / f"launch{len(started)}"
        folder.mkdir()
        started.append(Launch(folder, *launcher_flags, **kwargs))
        return started[-1]

    yield start
    for one in started:
        one.cleanup()


def answer_from_outside(port: int) -> bytes | None:
    """What 127.0.0.1:port says to a client in the test's own network namespace (None: nothing listens)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=3) as connection:
            connection.settimeout(3)
            return connection.recv(64)
    except OSError:  # refused, or timed out
        return None


def check_peers(latest: dict[str, dict]) -> None:
    for task, report in latest.items():
        assert report["peers"] and all(report["peers"].values()), (task, report)


def test_ports_answer_inside_the_namespace_only(launch):
    run = launch("--isolation=netns", "--restart=on-failure")
    latest = run.wait_reports()
    check_peers(latest)
    namespaces = {report["netns"] for report in latest.values()}
    assert len(namespaces) == 1 and OWN_NETNS not in namespaces, latest
    assert {report["private_env"] for report in latest.values()} == {"1"}, latest
    for task, report in latest.items():
        # Anything that answers out here is some other program on the same port number, never our task.
        assert answer_from_outside(report["port"]) != run.token.encode(), (task, report)
    assert PRIVATE_NAMESPACE_LINE.search(run.out.read_text()), run.describe()

    # A restarted task (as after a --kill drill) joins the same namespace and reaches its peers again.
    killed = latest["worker:1"]["pid"]
    os.kill(killed, signal.SIGKILL)
    latest = run.wait_reports(lambda latest: latest.get("worker:1", {}).get("pid", killed) != killed)
    check_peers({"worker:1": latest["worker:1"]})
    assert latest["worker:1"]["netns"] in namespaces, latest
    assert run.finish() == 0, run.describe()
    assert "restarting it on" in run.out.read_text(), run.describe()


def test_isolation_none_keeps_plain_loopback(launch):
    # A value inherited from an outer launch must not reach tasks that are not isolated.
    # A command of the user's binds its own ports, which the launcher cannot guard: say they may be open.
    run = launch("--isolation=none", "--allow_open_ports", env=dict(os.environ, PS_TOOLKIT_PRIVATE_NETWORK="1"))
    latest = run.wait_reports()
    check_peers(latest)
    for task, report in latest.items():
        assert report["netns"] == OWN_NETNS, latest
        assert report["private_env"] is None, latest
        assert answer_from_outside(report["port"]) == run.token.encode(), (task, report)
    assert run.finish() == 0, run.describe()
    assert "warning" not in run.err.read_text(), run.describe()


def netns_in_use(name: str) -> list[int]:
    """Every process on this machine whose network namespace is ``name`` ('net:[inode]')."""
    users = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/ns/net") == name:
                    users.append(int(entry))
            except OSError:  # gone meanwhile, or not ours to read
                pass
    return users


def test_sigkill_of_the_launcher_leaves_no_task_and_no_namespace(launch):
    run = launch("--isolation=netns")
    latest = run.wait_reports()
    namespace = latest["ps:0"]["netns"]
    pidfds = [os.pidfd_open(report["pid"]) for report in latest.values()]
    try:
        run.popen.kill()
        run.popen.wait(timeout=30)
        # Each pidfd turns readable when its task has exited (PR_SET_PDEATHSIG kills them).
        deadline = time.monotonic() + 20
        with selectors.DefaultSelector() as selector:
            for fd in pidfds:
                selector.register(fd, selectors.EVENT_READ)
            while selector.get_map() and time.monotonic() < deadline:
                for key, _ in selector.select(timeout=max(0.0, deadline - time.monotonic())):
                    selector.unregister(key.fd)
            assert not selector.get_map(), f"tasks still alive 20 s after the launcher's SIGKILL: {latest}"
    finally:
        for fd in pidfds:
            os.close(fd)
    # An anonymous namespace ends with its last process: nothing may still be in it.
    logwatch.wait_until(lambda: not netns_in_use(namespace), 10, f"{namespace} to be empty")


def without_network_namespaces() -> list[str]:
    """A command prefix in which no network namespace can be made (a user namespace's limit set to 0)."""
    if shutil.which("unshare") is None:
        pytest.skip("util-linux 'unshare' is not installed")
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"user namespaces are not available here: {probe.stderr.strip()}")
    limit = 'echo 0 > /proc/sys/user/max_net_namespaces && exec "$@"'
    return ["unshare", "--user", "--map-root-user", "sh", "-c", limit, "sh"]


def test_auto_warns_in_one_line_and_falls_back_to_loopback(launch, tmp_path):
    # TMPDIR: the port lock folder of the real root may not be writable by the mapped user.
    env = dict(os.environ, TMPDIR=str(tmp_path))
    run = launch("--isolation=auto", "--allow_open_ports", wrapper=without_network_namespaces(), env=env)
    latest = run.wait_reports()
    check_peers(latest)
    assert {report["private_env"] for report in latest.values()} == {None}, latest
    assert run.finish() == 0, run.describe()
    warnings = [line for line in run.err.read_text().splitlines() if "warning" in line]
    assert len(warnings) == 1 and "No space left on device" in warnings[0], run.describe()


def test_netns_required_but_impossible_fails_in_one_line(tmp_path):
    argv = [*without_network_namespaces(), sys.executable, LAUNCHER, "--isolation=netns", f"--log_dir={tmp_path}"]
    done = subprocess.run(
        [*argv, "--", sys.executable, LISTENING_TASK],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=dict(os.environ, TMPDIR=str(tmp_path)),
    )
    assert done.returncode == 2, done
    assert done.stderr.startswith("launch_local.py: --isolation=netns: cannot isolate the tasks: "), done
    assert len(done.stderr.splitlines()) == 1 and not list(tmp_path.glob("*.log")), done


@pytest.mark.slow
def test_real_training_run_in_a_private_namespace(tmp_path):
    argv = [
        sys.executable,
        LAUNCHER,
        "--isolation=netns",
        "--train_steps=100",
        "--quiet",
        "--nochart",
        f"--log_dir={tmp_path}",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=170, cwd=ROOT)
    if done.returncode == 2 and "cannot isolate" in done.stderr:
        skip_unless_root(done.stderr.strip())
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert PRIVATE_NAMESPACE_LINE.search(done.stdout), done.stdout
