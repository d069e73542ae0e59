"""A real two-node Ray cluster (a head and a second node, started here with ``ray start``) runs ps-launch-ray's jobs."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from ps_toolkit.backends.ray.elastic import request_workers
from ps_toolkit.launch.ports import reserve_ports
from tests.engine_daemons import Daemons, assert_no_task_left, describe, open_ports, summary_rows, unavailable
from tests.taskrun import REPO

pytestmark = pytest.mark.slow

JOB_TIMEOUT_SECS = 240
NODE_CPUS = 2  # logical: each node offers two task slots, so a 3- or 4-task job needs both nodes


@pytest.fixture(scope="module")
def ray_cluster():
    """(GCS address, environment for the launcher): a head and a second node, stopped at the end."""
    try:
        import ray  # noqa: F401
    except ImportError:
        unavailable("Ray", "ray is not installed (pip install -e '.[ray]')")
    ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
    # Ray's socket paths must stay short: a folder of its own under /tmp, not pytest's deep tmp_path.
    root = tempfile.mkdtemp(prefix="pstk-ray-", dir="/tmp")
    token = os.path.join(root, "auth_token")
    with open(token, "w", encoding="ascii") as handle:
        handle.write(secrets.token_hex(32))
    # Every process that talks to this cluster proves it knows the token: Ray's own ports stay closed.
    env = dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=token, RAY_USAGE_STATS_ENABLED="0")
    # Ray's fixed ports are chosen here (two nodes share this machine); its workers' ports are kept out of
    # the range the tasks' ports are drawn from (ports.py: 10000 up to the ephemeral range), as docs/deploy.md asks.
    reservation = reserve_ports(4)
    gcs_port, client_port, head_agent_port, node_agent_port = reservation.ports
    reservation.release()
    daemons = Daemons(env)
    common = ["--block", f"--num-cpus={NODE_CPUS}", "--node-ip-address=127.0.0.1", "--disable-usage-stats"]
    try:
        daemons.start(
            [ray_bin, "start", "--head", f"--port={gcs_port}", f"--ray-client-server-port={client_port}",
             "--include-dashboard=false", f"--temp-dir={root}", f"--dashboard-agent-listen-port={head_agent_port}",
             "--min-worker-port=40000", "--max-worker-port=40499", *common],
            ready="Ray runtime started", timeout_secs=120, attempts=3,
        )  # fmt: skip
        second = [ray_bin, "start", f"--address=127.0.0.1:{gcs_port}", "--min-worker-port=40500"]
        second += ["--max-worker-port=40999", f"--dashboard-agent-listen-port={node_agent_port}", *common]
        daemons.start(second, ready="Ray runtime started", timeout_secs=120, attempts=3)
        yield f"127.0.0.1:{gcs_port}", env
    finally:
        daemons.stop()
        shutil.rmtree(root, ignore_errors=True)


def launch_ray(address: str, env: dict, *args: str, log_dir: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "ps_toolkit.tools.launch_ray", f"--address={address}", f"--log_dir={log_dir}"]
    argv += ["--quiet", "--nochart", "--grace_secs=5", "--stop_grace_secs=5", *open_ports(), *args]
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT_SECS)
    finally:
        assert_no_task_left(log_dir)
    return done


def test_a_user_model_fn_with_embeddings_over_two_ps_runs_to_a_clean_end_over_both_nodes(ray_cluster, tmp_path):
    """The built-in model's job runs in the kill and Ctrl-C tests below; this one, a user's model_fn, ends clean."""
    address, env = ray_cluster
    log_dir = str(tmp_path / "run")
    env = dict(env, PYTHONPATH=os.path.join(REPO, "tests", "user_models"))
    model = ["--model_fn=clicks:model_fn", "--input_fn=clicks:input_fn", "--optimizer=adagrad"]
    done = launch_ray(address, env, "--num_ps=2", "--num_workers=2", "--train_steps=100", *model, log_dir=log_dir)
    assert done.returncode == 0, describe(done)
    rows = summary_rows(log_dir)
    assert sorted(rows) == ["ps:0", "ps:1", "worker:0", "worker:1"], describe(done)
    assert all(row[2:4] == ["0", "(finished)"] for row in rows.values()), rows
    assert "launcher: succeeded: the chief (worker:0) finished with status 0" in done.stdout, describe(done)
    # The two ps on the two nodes: SPREAD places the first bundles (the servers) apart.
    assert "launch_ray: 4 tasks on 2 node(s)" in done.stdout, describe(done)


@pytest.mark.parametrize("task", ["worker:1", "ps:0"])
def test_a_killed_task_is_restarted_on_its_node_and_port_and_the_job_completes(ray_cluster, tmp_path, task):
    address, env = ray_cluster
    log_dir = str(tmp_path / "run")
    # The kill must find the task running: a job of a few thousand steps outlasts 10 s even on a quiet
    # machine (a start-up takes most of 14 s there); on a loaded one the kill may come in the start-up.
    args = ["--num_ps=1", "--num_workers=2", "--train_steps=5000", "--restart=on-failure", f"--kill={task}@10s"]
    done = launch_ray(address, env, *args, log_dir=log_dir)
    assert done.returncode == 0, describe(done)
    assert "the task is not running; skipped" not in done.stdout, describe(done)
    rows = summary_rows(log_dir)
    assert rows[task][4] == "1", rows  # one restart
    assert re.search(rf"launcher: {task} .*; restarting it on {re.escape(rows[task][1])} ", done.stdout), describe(done)


def test_ctrl_c_leaves_no_task_actor_or_bundle_behind(ray_cluster, tmp_path):
    address, env = ray_cluster
    log_dir = str(tmp_path / "run")
    argv = [sys.executable, "-m", "ps_toolkit.tools.launch_ray", f"--address={address}", f"--log_dir={log_dir}"]
    argv += [
        "--num_ps=1",
        "--num_workers=2",
        "--train_steps=100000",
        "--timeout_secs=150",
        "--stop_grace_secs=5",
        *open_ports(),
    ]
    launcher = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        seen = []
        for line in launcher.stdout:  # ends with the launcher's output, bounded by the job's own steps
            seen.append(line)
            if re.search(r"s step \d+ ", line):  # the status line: the job is training
                break
        launcher.send_signal(signal.SIGINT)
        output, _ = launcher.communicate(timeout=60)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait(10)
        assert_no_task_left(log_dir)
    assert launcher.returncode == 128 + signal.SIGINT, "".join(seen) + output
    assert "launcher: FAILED: interrupted by SIGINT" in output, output
    assert ray_is_idle(address, env), "Ray still holds resources or a placement group of the interrupted job"


def test_an_estimator_script_runs_to_a_clean_end(ray_cluster, tmp_path):
    address, env = ray_cluster
    log_dir = str(tmp_path / "run")
    script = os.path.join(REPO, "tests", "fixtures_legacy", "estimator_cluster.py")
    command = [sys.executable, os.path.join(REPO, "scripts", "run_legacy.py"), script, "--model=dnn"]
    command += [f"--model_dir={tmp_path / 'model'}", "--max_steps=200"]
    job = ["--chief", "--num_workers=1", "--num_ps=1", "--evaluator", "--success_policy=all_workers"]
    job += ["--grace_secs=30", "--ps_grace_secs=30"]  # each task ends by itself after the chief, as locally
    done = launch_ray(address, env, *job, "--allow_open_ports", "--", *command, log_dir=log_dir)
    assert done.returncode == 0, describe(done)
    rows = summary_rows(log_dir)
    assert sorted(rows) == ["chief:0", "evaluator:0", "ps:0", "worker:0"], describe(done)
    assert all(row[2:4] == ["0", "(finished)"] for row in rows.values()), rows
    assert any(name.startswith("model.ckpt-") for name in os.listdir(tmp_path / "model")), describe(done)


def _progress_records(log_dir: str, log: str) -> int:
    try:
        with open(os.path.join(log_dir, log), encoding="utf-8", errors="replace") as handle:
            return sum(line.startswith("ps_toolkit progress: ") for line in handle)
    except OSError:
        return 0


def _log_has(log_dir: str, log: str, text: str) -> bool:
    try:
        with open(os.path.join(log_dir, log), encoding="utf-8", errors="replace") as handle:
            return text in handle.read()
    except OSError:
        return False


def _wait_until(condition, launcher: subprocess.Popen, timeout_secs: float, what: str, output: list) -> None:
    deadline = time.monotonic() + timeout_secs
    while not condition():
        assert launcher.poll() is None, f"the launcher ended before {what}:\n" + "".join(output)
        assert time.monotonic() < deadline, f"no {what} within {timeout_secs}s:\n" + "".join(output)
        threading.Event().wait(0.5)


def test_async_workers_grow_from_two_to_four_and_shrink_back(ray_cluster, tmp_path):
    address, env = ray_cluster
    log_dir = str(tmp_path / "run")
    # The input waits this long per batch until the test lets the job finish: the phases last as long as
    # the test watches them, however fast or slow the machine is.
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(os.path.join(REPO, "tests", "user_models", "paced.py"), models)
    pace = models / "pace"
    pace.write_text("0.3")
    env = dict(env, PYTHONPATH=str(models))
    argv = [sys.executable, "-m", "ps_toolkit.tools.launch_ray", f"--address={address}", f"--log_dir={log_dir}"]
    # Each task gets 30 s to end by itself after the chief (5 s is too short on a loaded machine).
    argv += ["--quiet", "--nochart", "--grace_secs=30", "--ps_grace_secs=30", "--stop_grace_secs=5"]
    argv += ["--timeout_secs=600", *open_ports()]
    argv += ["--min_workers=2", "--max_workers=4", "--ray_ps_cpus=0.5", "--ray_worker_cpus=0.5"]
    argv += ["--model_fn=paced:model_fn", "--input_fn=paced:input_fn", "--steps_per_run=1", "--train_steps=3000"]
    launcher = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(launcher.stdout), daemon=True)
    reader.start()
    try:
        chief_steps = lambda: _progress_records(log_dir, "worker-0.log") >= 2  # noqa: E731
        _wait_until(chief_steps, launcher, 240, "two progress records of the chief", output)
        request_workers(log_dir, 4)
        joined = lambda: all(_progress_records(log_dir, f"worker-{i}.log") >= 1 for i in (2, 3))  # noqa: E731
        _wait_until(joined, launcher, 300, "step of both new workers", output)
        request_workers(log_dir, 2)
        left = lambda: all(_log_has(log_dir, f"worker-{i}.log", "--- retired (elastic)") for i in (2, 3))  # noqa: E731
        _wait_until(left, launcher, 120, "retirement of both new workers", output)
        seen = _progress_records(log_dir, "worker-0.log")
        more = lambda: _progress_records(log_dir, "worker-0.log") >= seen + 2  # noqa: E731
        _wait_until(more, launcher, 120, "chief step after the shrink", output)
        pace.write_text("0")
        launcher.wait(timeout=JOB_TIMEOUT_SECS)
        reader.join(timeout=30)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait(10)
        assert_no_task_left(log_dir)
    text = "".join(output)
    assert launcher.returncode == 0, text
    assert "launch_ray: elastic: workers 2 -> 4 (workers asked for 4)" in text, text
    assert "launch_ray: elastic: workers 4 -> 2 (workers asked for 2)" in text, text
    phases = re.findall(r"elastic phase \d: (\d) workers .*: global step (\d+) -> (\d+), ([\d.]+) global steps/s", text)
    assert [count for count, *_ in phases] == ["2", "4", "2"], text
    assert all(int(last) > int(first) for _, first, last, _ in phases), text  # steps went on in every phase
    assert "launch_ray: elastic: worker:3 retired" in text and "launch_ray: elastic: worker:2 retired" in text, text
    with open(os.path.join(log_dir, "summary.txt"), encoding="utf-8") as handle:
        assert "elastic phase 3: 2 workers" in handle.read()
    rows = summary_rows(log_dir)  # the permanent tasks only: a retired worker is out of the verdict
    assert sorted(rows) == ["ps:0", "worker:0", "worker:1"], text
    assert all(row[2:4] == ["0", "(finished)"] for row in rows.values()), rows


IDLE_PROBE = """
import sys, time, ray
ray.init(address=sys.argv[1], log_to_driver=False, logging_level="ERROR")
deadline = time.monotonic() + 30  # Ray frees an ended job's actors and bundles asynchronously
while time.monotonic() < deadline:
    groups = [g for g in ray.util.placement_group_table().values() if g["state"] != "REMOVED"]
    if not groups and ray.available_resources().get("CPU") == ray.cluster_resources().get("CPU"):
        print("idle"); break
    time.sleep(0.5)
else:
    print("busy", ray.available_resources(), groups)
"""


def ray_is_idle(address: str, env: dict) -> bool:
    done = subprocess.run([sys.executable, "-c", IDLE_PROBE, address], env=env, capture_output=True, text=True,
                          timeout=90)  # fmt: skip
    return done.stdout.strip() == "idle"


BAD_INPUT = {
    "hosts": (["--worker_hosts=localhost:1"], 2, "launch_ray: --worker_hosts is ps-launch-local's only: on Ray"),
    "address": (["--address=nohost"], 2, "launch_ray: --address='nohost': give auto or HOST:PORT"),
    "nobody there": (["--address=127.0.0.1:1"], 200, "launch_ray: --address=127.0.0.1:1: nothing answers there"),
    "cpus": (["--ray_ps_cpus=-1"], 2, "launch_ray: --ray_ps_cpus=-1.0: must be between 0 and 1024"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_input_is_one_line_and_its_status(tmp_path, case):
    args, status, line = BAD_INPUT[case]
    argv = [sys.executable, "-m", "ps_toolkit.tools.launch_ray", f"--log_dir={tmp_path}", *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == status, describe(done)
    assert done.stderr.strip().startswith(line) and "\n" not in done.stderr.strip(), describe(done)
