"""The fork server and its clients trust no one they should not (process.server_trust, fork_client, fork_server).

A client sends a host's server its tasks' whole environment: only a server of its own user, at a path
nobody else could have put a socket at, that answers, gets it. A server survives any request, and a
task forked for a client that goes, however it goes, goes with it.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import psutil
import pytest

from ps_toolkit.launch import task_plan
from ps_toolkit.process import fork_client, fork_protocol
from ps_toolkit.process.fork_client import ForkServer, ForkUnavailable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = os.path.join(ROOT, "tests", "fixtures", "fork_probe.py")
FAKE_SERVER = os.path.join(ROOT, "tests", "fixtures", "fake_fork_server.py")
BOUND_SECS = 60

pytestmark = pytest.mark.timeout(300)


def _other_user() -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam("tester")
    except KeyError:
        return None


needs_another_user = pytest.mark.skipif(
    os.geteuid() != 0 or _other_user() is None, reason="needs root and a second user named tester"
)


@pytest.fixture(scope="module")
def env():
    return task_plan.task_env({"TF_CPP_MIN_LOG_LEVEL": "2"})


@pytest.fixture
def others_server(env, tmp_path):
    """A fake fork server run by the user tester, listening in tester's own folder; yields (path, record)."""
    tester = _other_user()
    folder = tempfile.mkdtemp(prefix="theirs-", dir="/tmp")  # where tester may reach it
    os.chown(folder, tester.pw_uid, tester.pw_gid)
    path, record = os.path.join(folder, "server.sock"), os.path.join(folder, "record")
    server = subprocess.Popen(
        [sys.executable, FAKE_SERVER, path, json.dumps(env), record],
        user=tester.pw_uid,
        group=tester.pw_gid,
        extra_groups=[],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert server.stdout.readline() == "listening\n"
        yield path, record
    finally:
        server.kill()
        server.wait(timeout=BOUND_SECS)
        server.stdout.close()
        shutil.rmtree(folder)


@needs_another_user
def test_a_root_launch_refuses_another_users_fork_server_and_sends_it_nothing(others_server, env):
    path, record = others_server
    client = ForkServer(env, address=path)
    with pytest.raises(ForkUnavailable, match=f"{os.path.dirname(path)} is owned by uid {_other_user().pw_uid}"):
        client.wait_ready()
    with pytest.raises(ForkUnavailable):
        client.spawn([sys.executable, PROBE], env=dict(env, DB_PASSWORD="secret"))
    client.close()
    assert not os.path.exists(record)


@needs_another_user
def test_a_socket_moved_into_a_private_folder_is_still_refused_by_its_peers_user(others_server, env, tmp_path):
    """Its folder and file are root's, but the process listening is tester's (SO_PEERCRED)."""
    path, record = others_server
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    moved = str(mine / "server.sock")
    os.rename(path, moved)
    os.chown(moved, 0, 0)
    client = ForkServer(env, address=moved)
    uid = _other_user().pw_uid
    with pytest.raises(ForkUnavailable, match=rf"{moved} is served by uid {uid} \(pid \d+\), not by you \(uid 0\)"):
        client.wait_ready()
    client.close()
    # The user's own server is not stopped by it: the planted socket is replaced.
    from ps_toolkit.process import host_socket, server_trust

    listener = host_socket.listen(moved)
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        probe.connect(moved)
        assert server_trust.peer_uid_pid(probe) == (0, os.getpid())
    finally:
        probe.close()
        listener.close()
    assert not os.path.exists(record)


def test_a_socket_in_a_folder_others_can_write_is_refused_by_client_and_server(env, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    path = str(shared / "server.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(1)
    try:
        client = ForkServer(env, address=path)
        with pytest.raises(ForkUnavailable, match=f"{shared} is a folder other users can write .mode 1777."):
            client.wait_ready(timeout_secs=10)
        client.close()
    finally:
        listener.close()
    os.unlink(path)
    from ps_toolkit.process import host_socket

    with pytest.raises(ValueError, match=f"{shared} is a folder other users can write"):
        host_socket.listen(path)
    argv = [sys.executable, "-m", "ps_toolkit.process.fork_server", "--listen", path]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=BOUND_SECS, cwd=ROOT)
    assert done.returncode == 2 and len(done.stdout.splitlines()) == 1 and not done.stderr, done
    assert done.stdout.startswith(f"fork_server: cannot listen at {path}: {shared} is a folder other users"), done


@needs_another_user
def test_a_group_writable_folder_is_trusted_only_when_the_group_is_the_users_alone(tmp_path):
    """A user-private group (umask 002 setups) writes nothing the user could not; another user's group can."""
    from ps_toolkit.process import server_trust

    folder = tmp_path / "group"
    folder.mkdir(mode=0o770)
    os.chmod(folder, 0o770)
    os.chown(folder, 0, 0)
    assert server_trust.folder_refusal(str(folder)) is None
    os.chown(folder, 0, _other_user().pw_gid)
    assert server_trust.folder_refusal(str(folder)).startswith(f"{folder} is a folder other users can write (mode 770)")


def test_a_server_that_neither_answers_nor_imports_is_named_and_bypassed(env, tmp_path):
    """A stalled server is given up after seconds, not after the 120 s an import may take."""
    path = str(tmp_path / "stalled.sock")
    code = (
        "import socket, sys, time\n"
        "s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); s.bind(sys.argv[1]); s.listen(4)\n"
        "print('listening', flush=True); time.sleep(600)\n"
    )
    stalled = subprocess.Popen([sys.executable, "-c", code, path], stdout=subprocess.PIPE, text=True)
    try:
        assert stalled.stdout.readline() == "listening\n"
        client = ForkServer(env, address=path)
        with pytest.raises(ForkUnavailable, match=rf"{path} \(pid {stalled.pid}\) did not answer within 3 s \(stopped"):
            client.wait_ready(timeout_secs=40)
        client.close()
    finally:
        stalled.kill()
        stalled.wait(timeout=BOUND_SECS)
        stalled.stdout.close()


# A server survives any request.


def _request_fds() -> list[int]:
    fds = [os.open(os.devnull, os.O_WRONLY), os.open(os.devnull, os.O_WRONLY)]
    return fds + [os.open(f"/proc/thread-self/ns/{kind}", os.O_RDONLY) for kind in ("user", "net")]


def _send_raw(path: str, payload: bytes, fds: list[int] | None = None) -> bytes:
    """Sends one datagram as a fresh client; returns the server's first answer after its ready (b"" if dropped)."""
    own = fds is None
    fds = _request_fds() if own else fds
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        sock.connect(path)
        sock.settimeout(BOUND_SECS)
        first = fork_protocol.decode(sock.recv(fork_protocol.MAX_MESSAGE))
        if "importing" in first:  # said at once while the server imports; "ready" follows
            first = fork_protocol.decode(sock.recv(fork_protocol.MAX_MESSAGE))
        assert "ready" in first, first
        socket.send_fds(sock, [payload], fds)
        return sock.recv(fork_protocol.MAX_MESSAGE)
    finally:
        sock.close()
        if own:
            for fd in fds:
                os.close(fd)


def _reads_to_end(fd: int, bound_secs: float) -> bool:
    """Reads ``fd`` until end of file, at most ``bound_secs`` in all; closes it. Whether the end came."""
    deadline = time.monotonic() + bound_secs
    try:
        while time.monotonic() < deadline:
            readable, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if readable and not os.read(fd, 65536):
                return True
        return False
    finally:
        os.close(fd)


def _request(env: dict, tmp_path, **changes) -> bytes:
    request = {"id": 1, "argv": [sys.executable, PROBE, "exit:0"], "env": env, "cwd": str(tmp_path), **changes}
    return fork_protocol.encode(request)


@pytest.fixture
def host(env, tmp_path):
    path = str(tmp_path / "host.sock")
    process = fork_client.start_host_server(path, env)
    yield path, process
    fork_client.stop_host_server(process)


def test_no_bad_request_reaches_the_server_or_another_clients_task(host, env, tmp_path):
    path, process = host
    trainer = ForkServer(env, address=path)
    running = trainer.spawn([sys.executable, PROBE, "sleep"], env=env, stdout=subprocess.PIPE)
    assert json.loads(running.stdout.readline())["ppid"] == process.pid
    bad = {
        "nested too deep": b"[" * 50_000 + b"]" * 50_000,
        "a NUL in PYTHONPATH": _request(dict(env, PYTHONPATH="/a\0/b"), tmp_path),
        "a NUL in argv": _request(env, tmp_path, argv=[sys.executable, PROBE + "\0x"]),
        "a NUL in cwd": _request(env, tmp_path, cwd=str(tmp_path) + "\0"),
        "a relative cwd": _request(env, tmp_path, cwd="relative"),
        "a number in env": _request(dict(env, X=1), tmp_path),
        "an = in a name": _request(dict(env, **{"A=B": "1"}), tmp_path),
        "a lone surrogate": _request(dict(env, X="\ud800"), tmp_path),
        "an id of another type": _request(env, tmp_path, id="1"),
        "not UTF-8": b"\xff\xfe{}",
    }
    for why, payload in bad.items():
        assert _send_raw(path, payload) == b"", why  # dropped, nothing forked
        assert process.poll() is None and running.poll() is None, why
    # Out of descriptors when the task is forked: that client is told, and the server goes on.
    server = psutil.Process(process.pid)
    soft, hard = server.rlimit(psutil.RLIMIT_NOFILE)
    server.rlimit(psutil.RLIMIT_NOFILE, (server.num_fds() + len(fork_protocol.FD_ORDER) + 2, hard))
    try:
        answer = fork_protocol.decode(_send_raw(path, _request(env, tmp_path)))
    finally:
        server.rlimit(psutil.RLIMIT_NOFILE, (soft, hard))
    assert answer["refused"].startswith("the fork server cannot fork now: Too many open files"), answer
    assert process.poll() is None and running.poll() is None
    assert [child.pid for child in server.children()] == [running.pid]
    # The other client's task ran on throughout; the server still forks.
    done = trainer.spawn([sys.executable, PROBE, "exit:5"], env=env, stdout=subprocess.DEVNULL)
    assert done.wait(timeout=BOUND_SECS) == 5
    running.kill()
    assert running.wait(timeout=BOUND_SECS) == -signal.SIGKILL
    running.stdout.close()
    trainer.close()


def test_a_client_that_goes_right_after_its_request_takes_the_task_with_it(host, env, tmp_path):
    """The task leads its own process group before its pid is sent: the client's going kills it, every time."""
    path, process = host
    for attempt in range(10):
        read_end, write_end = os.pipe()
        fds = _request_fds()
        os.close(fds[0])
        fds[0] = write_end
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            sock.connect(path)
            sock.settimeout(BOUND_SECS)
            while "ready" not in fork_protocol.decode(sock.recv(fork_protocol.MAX_MESSAGE)):
                pass  # "importing" first, while the server imports
            socket.send_fds(sock, [_request(env, tmp_path, argv=[sys.executable, PROBE, "sleep"])], fds)
        finally:
            sock.close()
            for fd in fds:
                os.close(fd)
        # End of file once every holder of the pipe's write end (the task alone) has gone.
        assert _reads_to_end(read_end, BOUND_SECS / 2), f"attempt {attempt}: the task outlived its client"
    _, alive = psutil.wait_procs(psutil.Process(process.pid).children(), timeout=BOUND_SECS / 2)
    assert process.poll() is None and alive == []


# A launcher killed at any moment leaves nothing.

LAUNCHER = os.path.join(ROOT, "scripts", "launch_local.py")
FAKE_TASK = os.path.join(ROOT, "tests", "fixtures", "fake_task.py")
RUN_LEGACY = os.path.join(ROOT, "scripts", "run_legacy.py")


@pytest.mark.slow
def test_launchers_killed_at_random_moments_of_start_up_leave_no_task(tmp_path):
    """SIGKILL at a random moment between the launcher's start and its tasks' first lines, many times: every task
    it started (forked from the session's host server, or exec'd) is gone within the bound."""
    import random

    host = psutil.Process(host_server_pid(os.environ[fork_client.HOST_SERVER_ENV]))
    chooser = random.Random(32)
    for attempt in range(10):
        isolation = ["--isolation=none", "--allow_open_ports"] if attempt % 2 else []
        argv = [sys.executable, LAUNCHER, f"--log_dir={tmp_path / str(attempt)}", "--nochart", *isolation, "--"]
        records = tmp_path / f"records{attempt}"
        records.mkdir()
        argv += [sys.executable, RUN_LEGACY, FAKE_TASK, f"--record_dir={records}", "--hang=worker:0,worker:1"]
        launcher = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            # Most in the 20 ms after the cluster is chosen (its tasks are being forked), the rest at any moment.
            if attempt < 7:
                _read_until(launcher, "launcher: cluster ")
            delay = chooser.uniform(0, 0.02 if attempt < 7 else 2.0)
            with contextlib.suppress(subprocess.TimeoutExpired):
                launcher.wait(timeout=delay)  # the moment of the kill, chosen at random (not a synchronisation)
        finally:
            launcher.kill()
            launcher.communicate(timeout=BOUND_SECS)
        left = _launch_remains(host, records)
        assert left == [], f"attempt {attempt} (killed {delay:.3f} s in): {left}"


def host_server_pid(path: str) -> int:
    found = [p.pid for p in psutil.Process().children() if path in p.cmdline()]
    assert len(found) == 1, found
    return found[0]


def _read_until(launcher: subprocess.Popen, prefix: str) -> None:
    deadline = time.monotonic() + BOUND_SECS
    output = b""
    while time.monotonic() < deadline:
        readable, _, _ = select.select([launcher.stdout], [], [], max(0.0, deadline - time.monotonic()))
        line = launcher.stdout.readline() if readable else b""
        output += line
        if not line or line.decode(errors="replace").startswith(prefix):
            return
    pytest.fail(f"no {prefix!r} line: {output.decode(errors='replace')[-2000:]}")


def _launch_remains(host: psutil.Process, records) -> list:
    """The launch's processes still alive after a bound: the host server's tasks and every recorded task."""
    recorded = []
    for record in records.glob("*.json"):
        with contextlib.suppress(psutil.NoSuchProcess, ValueError, KeyError):
            proc = psutil.Process(json.loads(record.read_text())["pid"])
            if FAKE_TASK in proc.cmdline() or proc.ppid() == host.pid:  # not a later process with its pid
                recorded.append(proc)
    suspects = {p.pid: p for p in [*host.children(), *recorded]}
    _, alive = psutil.wait_procs(list(suspects.values()), timeout=20)
    alive = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    for proc in alive:
        proc.kill()
    return alive
