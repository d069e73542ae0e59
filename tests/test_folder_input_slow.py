"""A run_task.py job with no step limit on a followed folder: stopped with Ctrl-C (SIGINT), it saves and exits 0;
started again on more files, it trains each record exactly once, as the model's own count in the checkpoint says."""

import atexit
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from ps_toolkit.launch.ports import reserve_ports
from tests.taskrun import REPO, RUN_TASK
from tests.test_folder_input import write_part

_RESERVATION = reserve_ports(1)
atexit.register(_RESERVATION.release)
MODEL = "tests.user_models.folder_records"  # importable with the repository on PYTHONPATH
BOUND_SECS = 240


def _run_until_step(tmp_path, name, pattern, checkpoint_dir, step):
    """Starts the chief alone, waits (bounded) for its checkpoint of ``step``, sends SIGINT, returns its exit."""
    params = json.dumps({"pattern": pattern, "ids": 48})
    command = [
        sys.executable, RUN_TASK, f"--worker_hosts=localhost:{_RESERVATION.ports[0]}", "--job_name=worker",
        "--task_index=0", f"--model_fn={MODEL}:model_fn", f"--input_fn={MODEL}:input_fn", f"--params={params}",
        "--train_steps=0", f"--checkpoint_dir={checkpoint_dir}", "--steps_per_run=1", "--batch_size=4",
        "--watchdog_secs=0", "--save_checkpoint_steps=2",
    ]  # fmt: skip
    out_path = tmp_path / f"{name}.out"
    with open(out_path, "w") as out, open(tmp_path / f"{name}.err", "w") as err:
        env = {**os.environ, "PYTHONPATH": REPO}
        process = subprocess.Popen(command, stdout=out, stderr=err, cwd=REPO, env=env)
    try:
        deadline = time.monotonic() + BOUND_SECS
        while not _reached(checkpoint_dir, step):
            assert process.poll() is None, f"ended early: {(tmp_path / f'{name}.err').read_text()[-2000:]}"
            assert time.monotonic() < deadline, f"no global step {step} in {BOUND_SECS}s"
            time.sleep(0.2)  # polling the checkpoint folder, bounded by the deadline
        process.send_signal(signal.SIGINT)
        return process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _reached(checkpoint_dir, step) -> bool:
    """Whether the newest checkpoint (the state file is written last) is of ``step`` or later."""
    prefix = tf.train.latest_checkpoint(checkpoint_dir) if os.path.isdir(checkpoint_dir) else None
    return prefix is not None and int(prefix.rsplit("-", 1)[1]) >= step


@pytest.mark.slow
def test_ctrl_c_saves_and_a_restart_trains_each_record_once(tmp_path):
    data = tmp_path / "clicks"
    data.mkdir()
    for i in range(3):  # 8 records a file, batches of 4: 6 steps
        write_part(data, f"part-{i}.tfrecord", range(8 * i, 8 * i + 8), mtime=(i + 1) * 10**9)
    pattern, checkpoint_dir = str(data / "part-*.tfrecord"), str(tmp_path / "ckpt")
    assert _run_until_step(tmp_path, "first", pattern, checkpoint_dir, 6) == 0
    for i in range(3, 6):
        write_part(data, f"part-{i}.tfrecord", range(8 * i, 8 * i + 8), mtime=(i + 1) * 10**9)
    assert _run_until_step(tmp_path, "second", pattern, checkpoint_dir, 12) == 0
    reader = tf.train.load_checkpoint(checkpoint_dir)
    assert reader.get_tensor("global_step") == 12
    (key,) = [name for name in reader.get_variable_to_shape_map() if name.endswith("times_trained")]
    counts = reader.get_tensor(key).tolist()
    # The model may count a record more than once per step (its loss built twice); never unevenly.
    assert len(set(counts)) == 1 and counts[0] >= 1, counts
