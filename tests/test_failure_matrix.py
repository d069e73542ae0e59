"""The failure matrix: real task processes killed and restarted, each row bounded in time.

Every row records what it measured (recovery seconds, steps lost) in
``FAILURE_MATRIX_OUT`` (a JSON-lines file) when that variable is set, which is
how docs/reliability.md gets its figures.
"""

import json
import os
import re
import subprocess
import sys
import time

import pytest

from ps_toolkit.base.errors import EXIT_ORPHANED, EXIT_RETRYABLE
from ps_toolkit.cluster.preflight import reachable
from ps_toolkit.launch.local_cluster import LocalCluster
from ps_toolkit.process.group import ProcessGroup
from ps_toolkit.process.starter import make_starter
from ps_toolkit.task.checkpoints import checkpoint_problem, prepare_checkpoint_dir
from tests import logwatch
from tests.taskrun import REPO

pytestmark = pytest.mark.slow
CHECKPOINT_EVERY = 50
# Tells recovery from a hang (which lasts until the 60 s watchdog); the time itself is a figure in docs/reliability.md.
RECOVERY_BOUND_SECS = 30
RUN_LEGACY = os.path.join(REPO, "scripts", "run_legacy.py")


def record(row: str, **figures):
    """Appends a row's measured figures to $FAILURE_MATRIX_OUT, if set."""
    path = os.environ.get("FAILURE_MATRIX_OUT")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"row": row, **figures}) + "\n")


def cluster(tmp_path, num_workers=2, *extra, steps=100000, orphan_secs=20):
    args = [
        f"--train_steps={steps}",
        f"--checkpoint_dir={tmp_path}/ckpt",
        f"--save_checkpoint_steps={CHECKPOINT_EVERY}",
        "--batch_size=32",
        "--watchdog_secs=60",
        f"--ps_orphan_timeout_secs={orphan_secs}",
        *extra,
    ]
    return LocalCluster(num_ps=1, num_workers=num_workers, train_args=args, log_dir=str(tmp_path / "logs"))


def wait_exit(local, job, index, timeout):
    """The task's exit status, waiting at most ``timeout`` seconds."""
    return logwatch.wait_until(
        lambda: (code,) if (code := local.returncode(job, index)) is not None else None,
        timeout,
        f"{job}:{index} to exit",
        lambda: local.log_tail(job, index),
    )[0]


def restart_and_wait_serving(local, job, index, timeout=60) -> float:
    """Restarts a task and returns the time its port accepts connections again."""
    local.restart(job, index)
    address = local.addresses[f"{job}:{index}"]
    logwatch.wait_until(lambda: reachable(address), timeout, f"{job}:{index} serving at {address}")
    return time.time()


def last_saved_step(log_text: str) -> int:
    """The newest checkpoint the chief finished writing (a save cut off by the kill does not count)."""
    return max(int(s) for s in re.findall(r"Calling checkpoint listeners after saving checkpoint (\d+)", log_text))


def test_kill_ps_and_restart_async(tmp_path):
    with cluster(tmp_path, 2, steps=1200) as local:
        chief = local.log_path("worker", 0)
        logwatch.wait_for_step(chief, 300, timeout=120)
        killed_at = time.time()
        local.kill("ps", 0)
        restarted_at = restart_and_wait_serving(local, "ps", 0)
        # The bound covers a new session and a restore on a loaded machine (load 15 took over 60 s).
        after = logwatch.wait_for_step(chief, 1, timeout=180, after_time=restarted_at)
        other = logwatch.wait_for_step(local.log_path("worker", 1), 1, timeout=180, after_time=restarted_at)
        codes = local.wait(["worker", "ps"], timeout_secs=180)
        assert set(codes.values()) == {0}, codes
        text = logwatch.read_log(chief)
        reached = max(r["global_step"] for r in logwatch.progress(chief) if r["time"] <= killed_at)
        restored = [int(s) for s in re.findall(r"Restoring parameters from .*model\.ckpt-(\d+)", text)]
        # The newest checkpoint completed before the kill is the one restored (a save the kill
        # cut short never completes: then two intervals are redone, otherwise at most one).
        assert restored, text[-3000:]
        saved_before_kill = last_saved_step(text[: text.rfind("Restoring parameters")])
        assert restored[-1] == saved_before_kill, (restored, saved_before_kill)
        lost = max(0, reached - restored[-1])
        recovery = {"chief": after["time"] - restarted_at, "worker": other["time"] - restarted_at}
        assert max(recovery.values()) < RECOVERY_BOUND_SECS, recovery
        record("kill -9 ps, restarted (async)", recovery_secs=recovery, steps_rolled_back=lost)


def test_kill_ps_and_restart_sync(tmp_path):
    with cluster(tmp_path, 2, "--sync_replicas", steps=600) as local:
        chief = local.log_path("worker", 0)
        logwatch.wait_for_step(chief, 150, timeout=120)
        local.kill("ps", 0)
        restarted_at = restart_and_wait_serving(local, "ps", 0)
        after = logwatch.wait_for_step(chief, 1, timeout=60, after_time=restarted_at)
        codes = local.wait(["worker", "ps"], timeout_secs=240)
        assert set(codes.values()) == {0}, codes
        assert os.path.exists(tmp_path / "ckpt" / "model.ckpt-600.index")
        record("kill -9 ps, restarted (sync)", recovery_secs=after["time"] - restarted_at)


def test_kill_non_chief_worker_training_continues_and_ps_restart_recovers(tmp_path):
    # The ps counts its orphan time only once no replica it waits for is reachable: after the chief's end.
    # Enough steps that the chief is still training when the faults come, however long its own start took
    # (worker 1 may train alone at hundreds of steps/s meanwhile).
    steps = 6000
    with cluster(tmp_path, 2, steps=steps, orphan_secs=6) as local:
        chief = local.log_path("worker", 0)
        before = logwatch.wait_for_step(chief, 200, timeout=120)
        assert before["global_step"] < steps - 1000, f"training nearly over before the faults: {before}"
        local.kill("worker", 1)
        # While worker 1 is down, a ps restart still recovers: device_filters keep
        # the chief's session from waiting on the dead worker.
        local.kill("ps", 0)
        restarted_at = restart_and_wait_serving(local, "ps", 0)
        after = logwatch.wait_for_step(chief, 1, timeout=60, after_time=restarted_at)
        assert after["time"] - restarted_at < RECOVERY_BOUND_SECS
        assert wait_exit(local, "worker", 0, timeout=180) == 0
        # Worker 1 never said it was done: the ps gives up after its orphan timeout.
        assert wait_exit(local, "ps", 0, timeout=60) == EXIT_ORPHANED
        assert "worker/task:1" in local.log_tail("ps", 0)
        record("kill -9 non-chief worker, ps restarted meanwhile", recovery_secs=after["time"] - restarted_at)


def test_killed_worker_restarted_rejoins(tmp_path):
    with cluster(tmp_path, 2, steps=1500) as local:
        logwatch.wait_for_step(local.log_path("worker", 1), 200, timeout=120)
        local.kill("worker", 1)
        local.restart("worker", 1)
        codes = local.wait(["worker", "ps"], timeout_secs=180)
        assert set(codes.values()) == {0}, codes


def test_kill_chief_and_restart_keeps_live_state(tmp_path):
    with cluster(tmp_path, 2, steps=1500) as local:
        chief = local.log_path("worker", 0)
        before = logwatch.wait_for_step(chief, 400, timeout=120)
        local.kill("worker", 0)
        local.restart("worker", 0)
        restarted_at = time.time()
        after = logwatch.wait_for_step(chief, 1, timeout=60, after_time=restarted_at)
        text = logwatch.read_log(chief)
        kept = re.findall(r"parameter servers still hold the model at global step (\d+)", text)
        assert kept and int(kept[-1]) >= before["global_step"], text[-2000:]
        assert after["global_step"] >= before["global_step"]
        codes = local.wait(["worker", "ps"], timeout_secs=180)
        assert set(codes.values()) == {0}, codes
        record("kill -9 chief, restarted", recovery_secs=after["time"] - restarted_at, steps_rolled_back=0)


def test_sync_two_of_two_with_a_dead_worker_ends_retryably(tmp_path):
    with cluster(tmp_path, 2, "--sync_replicas", "--watchdog_secs=8") as local:
        logwatch.wait_for_step(local.log_path("worker", 0), 50, timeout=120)
        local.kill("worker", 1)
        killed_at = time.monotonic()
        assert wait_exit(local, "worker", 0, timeout=60) == EXIT_RETRYABLE
        waited = time.monotonic() - killed_at
        message = local.log_tail("worker", 0)
        assert "gradients from 2 of 2 replicas" in message, message
        assert waited < 8 + 15, waited
        record("sync 2 of 2, one worker killed", seconds_to_retryable_exit=round(waited, 1))


def test_sync_backup_worker_keeps_progressing(tmp_path):
    with cluster(tmp_path, 3, "--sync_replicas", "--replicas_to_aggregate=2", steps=500) as local:
        chief = local.log_path("worker", 0)
        logwatch.wait_for_step(chief, 100, timeout=120)
        local.kill("worker", 2)
        killed_at = time.time()
        after = logwatch.wait_for_step(chief, 300, timeout=120, after_time=killed_at)
        assert wait_exit(local, "worker", 0, timeout=120) == 0
        assert wait_exit(local, "worker", 1, timeout=60) == 0
        record("sync 3 workers aggregate 2, one killed", steps_after_kill=after["global_step"])


def test_sync_with_launcher_restart_policy_completes(tmp_path):
    argv = [
        sys.executable,
        "scripts/launch_local.py",
        f"--log_dir={tmp_path}/run",
        "--sync_replicas",
        "--train_steps=3000",
        "--watchdog_secs=10",
        "--kill=worker:1@8s",
        "--restart=on-failure",
        "--quiet",
        "--nochart",
    ]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=300, cwd=os.path.dirname(os.path.dirname(__file__))
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    # The drill must have found the worker running (a job over before it would pass without one).
    assert "--kill drill: SIGKILL worker:1" in done.stdout, done.stdout[-4000:]
    assert "restarting it" in done.stdout, done.stdout[-4000:]


SAVER_SCRIPT = """
import sys, numpy as np, tensorflow as tf
tf.compat.v1.disable_eager_execution()
step = tf.compat.v1.train.get_or_create_global_step()
weights = tf.compat.v1.get_variable("w", initializer=np.zeros(200_000, np.float32))
saver = tf.compat.v1.train.Saver(max_to_keep=3)
with tf.compat.v1.Session() as session:
    session.run(tf.compat.v1.global_variables_initializer())
    latest = tf.train.latest_checkpoint(sys.argv[1])
    if latest:
        saver.restore(session, latest)
    said = False
    while True:
        session.run([step.assign_add(1), weights.assign_add(tf.ones_like(weights))])
        saver.save(session, sys.argv[1] + "/model.ckpt", global_step=step)
        if not said:  # the test times its kill from here: one whole save is on disk, whatever the load
            print("saved", flush=True)
            said = True
"""


def test_kill_during_checkpoint_saves_leaves_a_loadable_checkpoint(tmp_path):
    script = tmp_path / "saver.py"
    script.write_text(SAVER_SCRIPT)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    # Through run_legacy.py, so each round forks from the test's fork server instead of importing TensorFlow.
    command = [sys.executable, RUN_LEGACY, str(script), str(ckpt)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    for round_index in range(5):
        with ProcessGroup(make_starter("fork"), stop_grace_secs=0.0) as group:
            out = []
            saver = group.start("saver", command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            group.add_pipe(saver.stdout, out.append)
            deadline = time.monotonic() + 120
            while b"saved\n" not in b"".join(out):
                assert group.alive("saver") and time.monotonic() < deadline, (round_index, b"".join(out))
                group.poll(deadline - time.monotonic())
            # Let it save for a different time each round, so the kill lands at
            # a different point of the save cycle (the process never ends by itself).
            assert group.wait(["saver"], time.monotonic() + 0.3 + 0.17 * round_index)["saver"] is None
            group.kill("saver")
            assert group.wait(["saver"], time.monotonic() + 30)["saver"] is not None
        newest = prepare_checkpoint_dir(str(ckpt))
        assert newest is not None and checkpoint_problem(newest) is None, (round_index, newest)
    record("kill -9 during checkpoint saves, 5 times", always_loadable=True)
