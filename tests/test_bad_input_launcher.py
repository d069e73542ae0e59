"""Bad input at the edges: a port lost between the check and the bind; restarts that cannot help, a spent restart
budget and flags out of range in the launcher."""

import os
import socket
import subprocess
import sys

import pytest

from tests.taskrun import RUN_TASK

LAUNCHER = os.path.join(os.path.dirname(RUN_TASK), "launch_local.py")


def launch(tmp_path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    argv = [
        sys.executable,
        LAUNCHER,
        "--isolation=none",
        "--allow_open_ports",
        "--nochart",
        f"--log_dir={tmp_path}",
        *args,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def exiting_with(status: int) -> list[str]:
    """A task command (after --) that exits with ``status`` at once, ignoring the cluster flags appended to it."""
    return ["--", sys.executable, "-c", f"import sys; sys.exit({status})"]


def test_on_failure_does_not_retry_an_environment_error(tmp_path):
    done = launch(tmp_path, "--restart=on-failure", "--num_workers=1", "--num_ps=0", *exiting_with(5))
    assert done.returncode == 5, done.stdout + done.stderr
    assert "restarting it" not in done.stdout, done.stdout
    assert "not restarted: a permanent status" in done.stdout, done.stdout


def test_the_summary_says_when_the_restart_budget_is_spent(tmp_path):
    done = launch(
        tmp_path, "--restart=on-failure", "--max_restarts=2", "--num_workers=1", "--num_ps=0", *exiting_with(200)
    )
    assert done.returncode == 200, done.stdout + done.stderr
    assert done.stdout.count("restarting it") == 2, done.stdout
    assert "restart budget spent: 2/2 restarts used" in done.stdout, done.stdout
    assert "restart budget spent" in (tmp_path / "summary.txt").read_text()


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--num_workers=100000"], "--num_workers=100000"),
        (["--grace_secs=nan"], "--grace_secs=nan"),
        (["--timeout_secs=-1"], "--timeout_secs=-1"),
        (["--max_restarts=-1"], "--max_restarts=-1"),
        (["--kill=ps:0@nans"], "--kill"),
    ],
)
def test_launcher_flags_out_of_range_are_one_line_and_status_2(tmp_path, args, expected):
    done = launch(tmp_path, *args, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("launch_local.py: ")]
    assert len(lines) == 1 and expected in lines[0], done.stderr


def test_a_port_taken_between_the_check_and_the_bind_is_status_4(monkeypatch):
    """Two launches at the same instant: the loser's bind fails after its check passed."""
    import tensorflow as tf

    from ps_toolkit.base.errors import EXIT_PORT_IN_USE, PortInUseError
    from ps_toolkit.cluster.config import ClusterConfig
    from ps_toolkit.task import server

    with socket.socket() as taken:  # no SO_REUSEPORT: gRPC cannot share it
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cluster = ClusterConfig.from_host_flags(
            ps_hosts=None, worker_hosts=f"localhost:{port}", job_name="worker", task_index=0
        )
        monkeypatch.setattr(server, "check_port_free", lambda cluster: None)  # the check ran before the race
        with pytest.raises(PortInUseError) as lost:
            server.start_server(cluster, tf.compat.v1.ConfigProto())
    assert lost.value.exit_code == EXIT_PORT_IN_USE
    assert f"port {port}" in str(lost.value) and "between the check and the bind" in str(lost.value)
