"""The fork server under a launch: the launcher's death ends it and its tasks; LocalCluster forks its tasks."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import psutil
import pytest

from ps_toolkit.launch import task_plan
from ps_toolkit.process import fork_client, fork_starter
from ps_toolkit.process.fork_client import ForkServer
from tests.test_fork_server import BOUND_SECS, FAKE_TASK, LAUNCHER, PROBE, ROOT, RUN_LEGACY


@pytest.fixture(scope="module", name="env")
def task_environment():
    """A task's environment, as the launcher gives it."""
    return task_plan.task_env({"TF_CPP_MIN_LOG_LEVEL": "2"})


def start_hanging_launch(tmp_path, env=None) -> tuple[subprocess.Popen, str]:
    """A launch whose three fake tasks hang once started; returns it and its output up to their starts."""
    argv = [
        sys.executable,
        LAUNCHER,
        f"--log_dir={tmp_path / 'run'}",
        "--isolation=none",
        "--allow_open_ports",
        "--nochart",
        "--",
    ]
    argv += [sys.executable, RUN_LEGACY, FAKE_TASK, f"--record_dir={tmp_path}", "--hang=worker:0,worker:1"]
    launcher = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
    output = ""
    try:
        while output.count(" starting") < 3:
            line = launcher.stdout.readline().decode()
            assert line, output
            output += line
    except BaseException:
        launcher.kill()
        launcher.communicate(timeout=BOUND_SECS)
        raise
    return launcher, output


def servers_of(launcher: subprocess.Popen, tree: list) -> list:
    """The launch's own fork servers among its descendants ``tree``."""
    return [p for p in tree if p.ppid() == launcher.pid and "ps_toolkit.process.fork_server" in " ".join(p.cmdline())]


def test_sigkill_of_the_launcher_ends_the_fork_server_and_its_tasks(own_fork_server, tmp_path):
    """A launcher killed by SIGKILL takes its fork server and every forked task with it (PR_SET_PDEATHSIG)."""
    launcher, output = start_hanging_launch(tmp_path)
    try:
        tree = psutil.Process(launcher.pid).children(recursive=True)
        servers = servers_of(launcher, tree)
        tasks = [p for p in tree if p.ppid() in {s.pid for s in servers}]
        assert len(servers) == 1 and len(tasks) == 3, (tree, output)
    finally:
        launcher.kill()
        launcher.communicate(timeout=BOUND_SECS)
    _, alive = psutil.wait_procs(tree, timeout=10)
    alive = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    for proc in alive:
        proc.kill()
    assert not alive, alive


def test_local_cluster_forks_its_tasks_and_kills_and_restarts_them(tmp_path):
    from ps_toolkit.launch.local_cluster import LocalCluster

    command = [sys.executable, RUN_LEGACY, PROBE, "sleep"]
    with LocalCluster(num_ps=1, num_workers=1, command=command, log_dir=str(tmp_path)) as cluster:
        first = cluster.pid("ps", 0)
        parent = psutil.Process(first).parent()
        assert "ps_toolkit.process.fork_server" in " ".join(parent.cmdline()), parent.cmdline()
        assert cluster.kill("ps", 0) == -signal.SIGKILL
        cluster.restart("ps", 0)
        assert cluster.pid("ps", 0) != first and cluster.returncode("ps", 0) is None
        assert psutil.Process(cluster.pid("ps", 0)).ppid() == parent.pid
    assert cluster.returncode("ps", 0) == -signal.SIGTERM and cluster.returncode("worker", 0) == -signal.SIGTERM


# The host's server (fork_server --listen PATH): the session's own (conftest.py) serves these launches.


def host_server_pid(path: str) -> int:
    """The session's host server: this process's child listening at ``path`` (its tasks share its command line)."""
    found = [p.pid for p in psutil.Process().children() if path in p.cmdline()]
    assert len(found) == 1, found
    return found[0]


def test_a_launch_forks_from_the_host_server_and_its_sigkill_ends_only_its_tasks(tmp_path):
    path = os.environ[fork_client.HOST_SERVER_ENV]
    launcher, output = start_hanging_launch(tmp_path / "first")
    try:
        host = host_server_pid(path)
        tasks = [p for p in psutil.Process(host).children() if p.ppid() == host]
        records = list((tmp_path / "first").glob("*.json"))
        assert {p.pid for p in tasks} >= {json.loads(r.read_text())["pid"] for r in records}, (tasks, records)
        said = [f"fork server: the tasks are forked from the host's server at {path}"]
        assert len(records) == 3 and [line for line in output.splitlines() if "fork server" in line] == said, output
    finally:
        launcher.kill()
        launcher.communicate(timeout=BOUND_SECS)
    mine = [p for p in tasks if p.pid in {json.loads(r.read_text())["pid"] for r in records}]
    _, alive = psutil.wait_procs(mine, timeout=10)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], alive
    # The server serves the next launch.
    done = subprocess.run(
        [
            sys.executable,
            LAUNCHER,
            f"--log_dir={tmp_path / 'second'}",
            "--isolation=none",
            "--allow_open_ports",
            "--nochart",
        ]
        + ["--", sys.executable, RUN_LEGACY, FAKE_TASK, "--ps=exit0", "--steps=2", "--step_secs=0"],
        capture_output=True,
        text=True,
        timeout=BOUND_SECS,
        cwd=ROOT,
    )
    assert done.returncode == 0 and [line for line in done.stdout.splitlines() if "fork server" in line] == said, done
    assert host_server_pid(path) == host


@pytest.mark.parametrize("case", ["another environment", "nothing listening"])
def test_a_host_server_that_cannot_serve_is_one_line_and_the_launch_starts_its_own(case, tmp_path):
    env = dict(os.environ)
    if case == "another environment":
        env["TF_CPP_MIN_LOG_LEVEL"] = "1"
        expected = (
            f"{env[fork_client.HOST_SERVER_ENV]} imported TensorFlow under another TF_CPP_MIN_LOG_LEVEL "
            "(TF_CPP_MIN_LOG_LEVEL '2' there, '1' here; a server started under this launch's values would serve it)"
        )
    else:
        env[fork_client.HOST_SERVER_ENV] = str(tmp_path / "nobody.sock")
        expected = f"nothing listens at {tmp_path / 'nobody.sock'} (No such file or directory)"
    launcher, output = start_hanging_launch(tmp_path, env=env)
    try:
        tree = psutil.Process(launcher.pid).children(recursive=True)
        own = servers_of(launcher, tree)
        assert len(own) == 1 and len([p for p in tree if p.ppid() == own[0].pid]) == 3, (tree, output)
    finally:
        launcher.kill()
        launcher.communicate(timeout=BOUND_SECS)
    notes = [line for line in output.splitlines() if line.startswith("fork server:")]
    assert notes == [
        f"fork server: {fork_client.HOST_SERVER_ENV}: {expected}; this launch starts its own",
        "fork server: importing TensorFlow once for all the tasks; they start after it",  # said before the wait
    ], output
    psutil.wait_procs(tree, timeout=10)


def test_a_second_host_server_at_a_taken_path_refuses_in_one_line(tmp_path):
    taken = os.environ[fork_client.HOST_SERVER_ENV]
    (tmp_path / "file").write_text("")
    for path, why in ((taken, f"a fork server already listens at {taken}"), (tmp_path / "file", "is not a socket")):
        argv = [sys.executable, "-m", "ps_toolkit.process.fork_server", "--listen", str(path)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=BOUND_SECS, cwd=ROOT)
        assert done.returncode == 2 and done.stdout.startswith(f"fork_server: cannot listen at {path}: "), done
        assert why in done.stdout and len(done.stdout.splitlines()) == 1 and not done.stderr, done


def test_a_host_server_replaces_a_stale_socket_and_sigterm_ends_it_with_its_tasks(env, tmp_path, monkeypatch):
    path = str(tmp_path / "host.sock")
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    stale.bind(path)  # what a server killed by SIGKILL leaves
    stale.close()
    monkeypatch.setattr(fork_starter, "_SHARED", {})
    notes = []
    process = fork_client.start_host_server(path, env)
    try:
        client = fork_starter.shared_server(dict(env, **{fork_client.HOST_SERVER_ENV: path}), note=notes.append)
        task = client.spawn([sys.executable, PROBE, "sleep"], env=env, stdout=subprocess.PIPE)
        seen = json.loads(task.stdout.readline())
        assert seen["ppid"] == process.pid == client.pid, seen
        assert task.lost_with is None
    finally:
        code = fork_client.stop_host_server(process)
    assert code == 128 + signal.SIGTERM and not os.path.exists(path)
    assert task.wait(timeout=BOUND_SECS) == -signal.SIGKILL and task.server_name == path
    assert task.lost_with == f"its fork server, {path}, which has gone"
    task.stdout.close()
    client.close()
    assert notes == [f"fork server: {path} has gone, and the tasks it forked with it"], notes


def test_a_launch_whose_host_server_goes_names_the_server_in_its_verdict(tmp_path):
    """The tasks die with their server: the verdict says so instead of blaming the first task it handles."""
    path = str(tmp_path / "host.sock")
    process = fork_client.start_host_server(path, task_plan.task_env())
    try:
        launcher, _ = start_hanging_launch(tmp_path, env=dict(os.environ, **{fork_client.HOST_SERVER_ENV: path}))
    finally:
        fork_client.stop_host_server(process)
    output, _ = launcher.communicate(timeout=BOUND_SECS)
    verdict = [line for line in output.decode().splitlines() if line.startswith("launcher: FAILED: ")]
    assert launcher.returncode == 1 and len(verdict) == 1, output
    assert verdict[0].endswith(
        f"was killed by SIGKILL with its fork server, {path}, which has gone; every log is in {tmp_path / 'run'}"
    ), verdict


@pytest.mark.parametrize(
    "field, value, why",
    [
        ("executable", "/other/python3", "runs another Python (/other/python3)"),
        ("package_parent", "/other/checkout", "runs the ps_toolkit of /other/checkout"),
        (
            "import_key",
            [["TF_CPP_MIN_LOG_LEVEL", "0"], ["PYTHONHASHSEED", "0"]],
            "imported TensorFlow under another PYTHONHASHSEED, TF_CPP_MIN_LOG_LEVEL (PYTHONHASHSEED '0' there, unset"
            " here; TF_CPP_MIN_LOG_LEVEL '0' there, '2' here; a server started under this launch's values would"
            " serve it)",
        ),
        ("mount_namespace", 1, "runs in another mount namespace"),
    ],
)
def test_a_host_server_that_would_not_run_tasks_as_exec_would_is_refused(field, value, why, tmp_path):
    """Only a server with the launch's Python, toolkit, import-time variables and mounts forks its tasks."""
    from ps_toolkit.base.paths import PACKAGE_PARENT
    from ps_toolkit.process import fork_protocol

    env = {"TF_CPP_MIN_LOG_LEVEL": "2", "PATH": "/bin"}
    client = ForkServer(env, address=str(tmp_path / "server.sock"))
    ready = {
        "executable": os.path.realpath(sys.executable),
        "package_parent": PACKAGE_PARENT,
        "import_key": [list(item) for item in fork_protocol.import_key(env)],
        "mount_namespace": os.stat("/proc/self/ns/mnt").st_ino,
    }
    assert client._mismatch(ready) is None
    assert client._mismatch(dict(ready, **{field: value})) == f"{tmp_path / 'server.sock'} {why}"
    # A forked task makes its own streams: the server's PYTHONUNBUFFERED does not reach it.
    assert fork_protocol.import_key({"PYTHONUNBUFFERED": "1", "PYTHONHASHSEED": "0"}) == (("PYTHONHASHSEED", "0"),)
    # A task's PYTHONPATH is compared task by task (python_path): it may add folders to the server's.
    assert fork_protocol.import_key({"PYTHONPATH": "/user_model"}) == ()


def test_a_bad_or_stalled_client_of_the_host_server_costs_only_itself(env, tmp_path):
    """A request that is not one drops its client only; a client that never reads stalls nobody else."""
    from ps_toolkit.process import fork_protocol

    path = str(tmp_path / "host.sock")
    process = fork_client.start_host_server(path, env)
    clients = []
    try:
        bad = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        clients.append(bad)
        bad.connect(path)
        bad.settimeout(BOUND_SECS)
        first = fork_protocol.decode(bad.recv(fork_protocol.MAX_MESSAGE))
        if "importing" in first:  # said at once while the server imports; "ready" follows
            first = fork_protocol.decode(bad.recv(fork_protocol.MAX_MESSAGE))
        assert "ready" in first, first
        bad.send(b'{"argv": []}')
        assert bad.recv(fork_protocol.MAX_MESSAGE) == b""  # dropped

        stalled = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        clients.append(stalled)
        stalled.connect(path)
        fds = [os.open(os.devnull, os.O_WRONLY), os.open(os.devnull, os.O_WRONLY)]
        fds += [os.open(f"/proc/thread-self/ns/{kind}", os.O_RDONLY) for kind in ("user", "net")]
        request = {"argv": [sys.executable, PROBE, "exit:0"], "env": env, "cwd": str(tmp_path)}
        for number in range(30):  # a reply and an exit each: far more than the socket holds unread
            socket.send_fds(stalled, [fork_protocol.encode({"id": number, **request})], fds)
        for fd in fds:
            os.close(fd)

        client = ForkServer(env, address=path)
        task = client.spawn([sys.executable, PROBE, "exit:4"], env=env, stdout=subprocess.PIPE)
        seen = json.loads(task.stdout.readline())
        task.stdout.close()
        assert task.wait(timeout=BOUND_SECS) == 4
        assert seen["fds"] == [], seen  # nothing of the server's: its sockets, selector, listener
        assert process.poll() is None
        client.close()
    finally:
        for sock in clients:
            sock.close()
        fork_client.stop_host_server(process)


def test_a_host_server_needs_a_path_and_says_how_on_help(tmp_path):
    argv = [sys.executable, "-m", "ps_toolkit.process.fork_server"]
    done = subprocess.run([*argv, "--listen", ""], capture_output=True, text=True, timeout=BOUND_SECS, cwd=ROOT)
    assert done.returncode == 2 and done.stderr.startswith("usage: ") and not done.stdout, done
    done = subprocess.run([*argv, "--help"], capture_output=True, text=True, timeout=BOUND_SECS, cwd=ROOT)
    assert done.returncode == 0 and "PS_TOOLKIT_FORK_SERVER=PATH" in done.stdout and not done.stderr, done


def test_a_host_server_started_by_hand_says_three_lines_and_nothing_else(env, tmp_path):
    """What a terminal shows: listening, ready, stopped; TensorFlow's import chatter is kept off it."""
    path = str(tmp_path / "host.sock")
    argv = [sys.executable, "-m", "ps_toolkit.process.fork_server", "--listen", path]
    server = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    try:
        lines = [server.stdout.readline(), server.stdout.readline()]
    finally:
        server.send_signal(signal.SIGINT)
        out, err = server.communicate(timeout=BOUND_SECS)
    listening = f"fork_server: listening at {path} (pid {server.pid}); importing TensorFlow\n"
    assert lines == [listening, "fork_server: ready\n"], lines
    assert out == "fork_server: stopped; its tasks were ended and its socket removed\n" and err == "", (out, err)
    assert server.returncode == 128 + signal.SIGINT and not os.path.exists(path)
