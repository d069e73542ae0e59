"""A real Spark standalone cluster (a master and two workers, from spark-class) runs ps-launch-spark's jobs."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import psutil
import pytest

from ps_toolkit.launch.ports import reserve_ports
from tests.engine_daemons import Daemons, assert_no_task_left, describe, open_ports, summary_rows, unavailable
from tests.taskrun import REPO

pytestmark = pytest.mark.slow

JOB_TIMEOUT_SECS = 300
WORKER_CORES = 2  # two slots per worker: a 3- or 4-task barrier stage needs both workers


@pytest.fixture(scope="module")
def spark_cluster():
    """(master URL, environment for the driver): a master and two workers, stopped at the end."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        unavailable("Spark", "pyspark is not installed (pip install -e '.[spark]')")
    if shutil.which("java") is None:
        unavailable("Spark", "no java on PATH (apt-get install default-jre-headless)")
    spark_class = os.path.join(os.path.dirname(sys.executable), "spark-class")
    root = tempfile.mkdtemp(prefix="pstk-spark-")
    reservation = reserve_ports(6)
    master_port, master_ui, *worker_ports = reservation.ports
    reservation.release()
    # Only loopback, no REST submission server, workers' folders here: nothing reaches this cluster from outside.
    daemon_opts = "-Dspark.master.rest.enabled=false -Dspark.ui.enabled=true"
    env = dict(
        os.environ,
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_MASTER_OPTS=daemon_opts,
        SPARK_WORKER_DIR=os.path.join(root, "work"),
        SPARK_LOG_DIR=os.path.join(root, "logs"),
        SPARK_NO_DAEMONIZE="1",
    )
    daemons = Daemons(env)
    master = f"spark://127.0.0.1:{master_port}"
    try:
        daemons.start(
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
             "--port", str(master_port), "--webui-port", str(master_ui)],
            ready="I have been elected leader", timeout_secs=180,
        )  # fmt: skip
        for index in range(2):
            port, ui_port = worker_ports[2 * index : 2 * index + 2]
            daemons.start(
                [spark_class, "org.apache.spark.deploy.worker.Worker", master, "--host", "127.0.0.1",
                 "--port", str(port), "--webui-port", str(ui_port), "--cores", str(WORKER_CORES),
                 "--memory", "1g", "--work-dir", os.path.join(root, f"work-{index}")],
                ready="Successfully registered with master", timeout_secs=180,
            )  # fmt: skip
        yield master, env
    finally:
        daemons.stop()
        shutil.rmtree(root, ignore_errors=True)


def launch_spark(master: str, env: dict, *args: str, log_dir: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "ps_toolkit.tools.launch_spark", f"--master={master}", f"--log_dir={log_dir}"]
    argv += ["--nochart", "--spark_executor_memory=512m", *open_ports(), *args]
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT_SECS)
    finally:
        assert_no_task_left(log_dir)
    return done


def test_a_user_model_fn_with_embeddings_over_two_ps_runs_to_a_clean_end_as_one_barrier_stage(spark_cluster, tmp_path):
    """The built-in model's job runs in the kill and Ctrl-C tests below; this one, a user's model_fn, ends clean."""
    master, env = spark_cluster
    log_dir = str(tmp_path / "run")
    env = dict(env, PYTHONPATH=os.path.join(REPO, "tests", "user_models"))
    model = ["--model_fn=clicks:model_fn", "--input_fn=clicks:input_fn", "--optimizer=adagrad"]
    done = launch_spark(master, env, "--num_ps=2", "--num_workers=2", "--train_steps=100", *model, log_dir=log_dir)
    assert done.returncode == 0, describe(done)
    rows = summary_rows(log_dir)
    assert sorted(rows) == ["ps:0", "ps:1", "worker:0", "worker:1"], describe(done)
    assert all(row[2:4] == ["0", "(finished)"] for row in rows.values()), rows
    assert "launcher: succeeded: the chief (worker:0) finished with status 0" in done.stdout, describe(done)
    # The logs came back to the driver's run folder: the chief's holds its final result line.
    with open(os.path.join(log_dir, "worker-0.log"), encoding="utf-8") as handle:
        assert '"final_loss"' in handle.read()


def test_a_killed_task_fails_the_stage_spark_runs_it_again_and_the_chief_resumes(spark_cluster, tmp_path):
    """A worker killed, then (in the stage's second attempt) the ps: two retries of one job, each resumed."""
    master, env = spark_cluster
    log_dir = str(tmp_path / "run")
    launcher = start_spark(master, env, log_dir, "--train_steps=3000", "--restart=on-failure")
    try:
        deadline = time.monotonic() + JOB_TIMEOUT_SECS
        killed_at = None
        for job in ("worker", "ps"):
            victim = wait_for_training(log_dir, job, deadline, after=killed_at)
            killed_at = time.time()
            victim.kill()
        output, _ = launcher.communicate(timeout=JOB_TIMEOUT_SECS)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait(30)
        assert_no_task_left(log_dir)
    assert launcher.returncode == 0, output[-5000:]
    rows = summary_rows(log_dir)
    assert all(row[2:5] == ["0", "(finished)", "2"] for row in rows.values()), rows  # two stage retries
    with open(os.path.join(log_dir, "worker-0.log"), encoding="utf-8") as handle:
        assert "resuming from global step" in handle.read()


def test_the_replicas_read_their_partition_of_a_dataframe(spark_cluster, tmp_path):
    master, env = spark_cluster
    log_dir = str(tmp_path / "run")
    rows = tmp_path / "rows.csv"
    values = [(i % 7 - 3.0, i % 5 - 2.0) for i in range(101)]
    rows.write_text("x1,x2,y\n" + "".join(f"{a},{b},{2 * a - 3 * b + 1}\n" for a, b in values))
    env = dict(env, PYTHONPATH=os.path.join(REPO, "tests", "user_models"))
    model = ["--model_fn=frame_rows:model_fn", "--input_fn=frame_rows:input_fn", "--batch_size=8"]
    data = [f"--input_path={rows}", "--input_format=csv"]
    done = launch_spark(master, env, "--num_ps=1", "--num_workers=2", "--train_steps=100", *model, *data,
                        log_dir=log_dir)  # fmt: skip
    assert done.returncode == 0, describe(done)
    rows_seen = {}
    for task in ("worker-0", "worker-1"):
        with open(os.path.join(log_dir, f"{task}.log"), encoding="utf-8") as handle:
            rows_seen[task] = int(re.search(r"partition rows: (\d+)", handle.read()).group(1))
    assert sorted(rows_seen.values()) == [50, 51], rows_seen  # 101 rows dealt round-robin over 2 replicas


def test_a_bad_input_path_is_one_line_and_status_2(tmp_path):
    # Refused before Spark starts: no master is reached.
    done = launch_spark("spark://127.0.0.1:1", dict(os.environ), f"--input_path={tmp_path}/none.parquet",
                        log_dir=str(tmp_path / "run"))  # fmt: skip
    assert done.returncode == 2, describe(done)
    assert done.stderr.strip() == f"launch_spark: --input_path={tmp_path}/none.parquet: no such file or folder"


def test_an_estimator_script_runs_to_a_clean_end(spark_cluster, tmp_path):
    master, env = spark_cluster
    log_dir = str(tmp_path / "run")
    done = launch_spark(master, env, *ESTIMATOR_JOB, "--allow_open_ports", "--", *estimator_command(tmp_path),
                        log_dir=log_dir)  # fmt: skip
    assert done.returncode == 0, describe(done)
    rows = summary_rows(log_dir)
    assert sorted(rows) == ["chief:0", "evaluator:0", "ps:0", "worker:0"], describe(done)
    assert all(row[2:4] == ["0", "(finished)"] for row in rows.values()), rows
    assert any(name.startswith("model.ckpt-") for name in os.listdir(tmp_path / "model")), describe(done)


ESTIMATOR_JOB = ["--chief", "--num_workers=1", "--num_ps=1", "--evaluator", "--success_policy=all_workers"]


def estimator_command(tmp_path) -> list[str]:
    """tf.estimator.train_and_evaluate over TF_CONFIG, through run_legacy (tests/fixtures_legacy)."""
    script = os.path.join(REPO, "tests", "fixtures_legacy", "estimator_cluster.py")
    run_legacy = os.path.join(REPO, "scripts", "run_legacy.py")
    return [sys.executable, run_legacy, script, "--model=dnn", f"--model_dir={tmp_path / 'model'}", "--max_steps=200"]


def test_ctrl_c_leaves_no_executor_task_process_or_port_behind(spark_cluster, tmp_path):
    master, env = spark_cluster
    cluster_root = os.path.dirname(env["SPARK_WORKER_DIR"])
    log_dir = str(tmp_path / "run")
    launcher = start_spark(master, env, log_dir, "--train_steps=100000", "--timeout_secs=400")
    try:
        task = wait_for_training(log_dir, "worker", deadline=time.monotonic() + JOB_TIMEOUT_SECS)
        ports = task_ports(task.cmdline())
        assert executors(cluster_root), "the running job has no executor of this cluster"
        launcher.send_signal(signal.SIGINT)
        output, _ = launcher.communicate(timeout=120)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait(30)
    assert launcher.returncode == 128 + signal.SIGINT, output[-5000:]
    assert "launcher: FAILED: interrupted; the stage was cancelled" in output, output[-5000:]
    # The standalone workers end an application's executors once its driver has gone: bounded.
    deadline = time.monotonic() + 60
    while (executors(cluster_root) or listening(ports)) and time.monotonic() < deadline:
        time.sleep(0.5)  # a poll of the process table, bounded by the deadline
    assert not executors(cluster_root), [p.info["cmdline"] for p in executors(cluster_root)]
    assert not listening(ports), f"task ports still listening: {listening(ports)} of {ports}"
    assert_no_task_left(log_dir)


def task_ports(cmdline: list[str]) -> set[int]:
    """Every task's port, from one task's --ps_hosts and --worker_hosts."""
    words = " ".join(cmdline).split()
    hosts = [word.split("=", 1)[1] for word in words if word.startswith(("--ps_hosts=", "--worker_hosts="))]
    return {int(address.rpartition(":")[2]) for text in hosts for address in text.split(",")}


def executors(cluster_root: str) -> list[psutil.Process]:
    """This test cluster's executor JVMs (their folders are under the cluster's work dirs)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if "CoarseGrainedExecutorBackend" in " ".join(process.info["cmdline"] or []):
            try:
                if process.cwd().startswith(cluster_root):
                    found.append(process)
            except psutil.Error:
                continue
    return found


def listening(ports: set[int]) -> list[int]:
    return sorted({c.laddr.port for c in psutil.net_connections("tcp") if c.status == "LISTEN"} & ports)


def start_spark(master: str, env: dict, log_dir: str, *args: str) -> subprocess.Popen:
    """The launcher of a 1 ps + 2 worker job that checkpoints often, running; its output in one pipe."""
    argv = [sys.executable, "-m", "ps_toolkit.tools.launch_spark", f"--master={master}", f"--log_dir={log_dir}"]
    argv += ["--nochart", "--spark_executor_memory=512m", "--num_ps=1", "--num_workers=2"]
    argv += ["--save_checkpoint_steps=50", *open_ports(), *args]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for_training(log_dir: str, job: str, deadline: float, after: float | None = None) -> psutil.Process:
    """The process of ``job``'s last task (worker:1, ps:0), once the chief has saved a checkpoint; with
    ``after`` (a time), a process started after it, once a checkpoint was saved after it (a resumed attempt)."""
    index = "1" if job == "worker" else "0"
    checkpoint = os.path.join(log_dir, "checkpoints", "checkpoint")
    while time.monotonic() < deadline:
        if os.path.exists(checkpoint) and (after is None or os.path.getmtime(checkpoint) > after):
            for process in psutil.process_iter(["cmdline", "create_time"]):
                # A task's title is its whole command line in one string (setproctitle): match words of it.
                words = " ".join(process.info["cmdline"] or []).split()
                if (
                    any(log_dir in word for word in words)
                    and f"--job_name={job}" in words
                    and f"--task_index={index}" in words
                    and (after is None or process.info["create_time"] > after)
                ):
                    return process
        time.sleep(0.5)  # a poll of the run folder and the process table, bounded by the deadline
    pytest.fail(f"no checkpoint in {checkpoint} with {job}:{index} running before the deadline")


def test_bad_master_is_one_line_and_status_2(tmp_path):
    done = launch_spark("mesos://x", dict(os.environ), log_dir=str(tmp_path / "run"))
    assert done.returncode == 2, describe(done)
    assert done.stderr.strip().startswith("launch_spark: --master='mesos://x': give spark://HOST:PORT"), describe(done)
