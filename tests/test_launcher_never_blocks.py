"""The launcher never blocks or dies for its own output, and what a task started dies with the run.

Stand-in tasks (no TensorFlow), exec'd after ``--``: a console reader that
went away or never reads, a log folder with no room, and a wrapper script
whose children would outlive a SIGKILLed launcher.
"""

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCHER = os.path.join(ROOT, "scripts", "launch_local.py")
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
FAST = ["--grace_secs=1", "--ps_grace_secs=0.5", "--stop_grace_secs=1", "--isolation=none", "--allow_open_ports"]
FAST += ["--nochart"]
# A run of these stand-ins takes a few seconds; the bound allows for a loaded 2-core machine.
RUN_BOUND_SECS = 60.0


def start_launcher(tmp_path, flags, task, stdout):
    argv = [sys.executable, LAUNCHER, *FAST, f"--log_dir={tmp_path / 'run'}", *flags, "--", *task]
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": ROOT}
    stderr = open(tmp_path / "launcher.stderr", "wb")  # noqa: SIM115 - closed with the process below
    try:
        return subprocess.Popen(argv, stdout=stdout, stderr=stderr, env=env, cwd=ROOT, stdin=subprocess.DEVNULL)
    finally:
        stderr.close()


def stop(process):
    if process.poll() is None:
        process.kill()
    process.wait(timeout=RUN_BOUND_SECS)


def chatty(*flags):
    return [sys.executable, os.path.join(FIXTURES, "chatty_task.py"), *flags]


def summary(tmp_path):
    return (tmp_path / "run" / "summary.txt").read_text()


def test_a_console_reader_that_goes_away_stops_the_echo_not_the_run(tmp_path):
    """``launch_local.py ... | head -n 5``: the pipe closes while the tasks still print."""
    fake = [sys.executable, os.path.join(FIXTURES, "fake_task.py"), "--ps=exit0", "--steps=60", "--step_secs=0.05"]
    read_end, write_end = os.pipe()
    process = start_launcher(tmp_path, [], fake, write_end)
    os.close(write_end)
    try:
        with os.fdopen(read_end, "rb") as reader:
            head = [reader.readline() for _ in range(2)]
        assert head[0].startswith(b"launcher: run folder"), head
        assert process.wait(timeout=RUN_BOUND_SECS) == 0, (tmp_path / "launcher.stderr").read_text()
    finally:
        stop(process)
    assert "succeeded: the chief (worker:0) finished with status 0" in summary(tmp_path)
    assert "Traceback" not in (tmp_path / "launcher.stderr").read_text()


def test_a_console_reader_that_never_reads_does_not_hold_the_run(tmp_path):
    """A pipe nobody reads fills (64 KiB); the tasks print ten times that, and the run still ends."""
    read_end, write_end = os.pipe()
    # worker:1 may finish well after the chief on a loaded machine; it is given the time.
    process = start_launcher(tmp_path, ["--grace_secs=60"], chatty("--lines=2000"), write_end)
    os.close(write_end)
    try:
        assert process.wait(timeout=RUN_BOUND_SECS) == 0, (tmp_path / "launcher.stderr").read_text()
    finally:
        stop(process)
        os.close(read_end)
    assert "succeeded: the chief (worker:0) finished with status 0" in summary(tmp_path)
    log = (tmp_path / "run" / "worker-1.log").read_text()
    assert "worker:1 line 1999 " in log  # the task itself was never held up


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 256 KiB tmpfs (root only), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def test_a_full_log_folder_costs_one_warning_not_the_run(tmp_path, small_tmpfs):
    """Three tasks print 3 x 600 KiB into a 256 KiB folder; they drop what does not fit, as the toolkit's do."""
    log_dir = small_tmpfs / "run"
    argv = [sys.executable, LAUNCHER, *FAST, f"--log_dir={log_dir}", "--", *chatty("--lines=6000", "--tolerant")]
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": ROOT}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=RUN_BOUND_SECS)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    warnings = [line for line in output.splitlines() if "cannot write to the log folder" in line]
    assert len(warnings) == 1 and "No space left on device" in warnings[0], output
    assert "launcher: succeeded: the chief (worker:0) finished with status 0" in output
    assert "whether it trained is unknown: its output did not fit in the log folder" in output, output
    assert "Traceback" not in output


def _pids(record_dir):
    # helper-<pid>.tmp is still being written; its rename to helper-<pid> is the record.
    names = [name for name in os.listdir(record_dir) if name.startswith("helper-") and not name.endswith(".tmp")]
    return [int((record_dir / name).read_text()) for name in names]


def _wait_for(condition, bound_secs, what):
    deadline = time.monotonic() + bound_secs
    while not condition():
        assert time.monotonic() < deadline, f"{what} after {bound_secs:g} s"
        time.sleep(0.05)  # polling other processes' state, bounded by the deadline


def _alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_wrapper_scripts_children_die_when_the_launcher_is_sigkilled(tmp_path):
    """Launcher SIGKILLed: the wrappers die by PDEATHSIG; their background helpers and tasks must go too."""
    records = tmp_path / "records"
    records.mkdir()
    task = [os.path.join(FIXTURES, "wrapper_task.sh"), str(records), sys.executable]
    task += [os.path.join(FIXTURES, "fake_task.py"), f"--record_dir={records}", "--steps=100000", "--step_secs=0.1"]
    process = start_launcher(tmp_path, [], task, subprocess.DEVNULL)
    left = []
    try:
        # Three tasks: each wrapper records its helper, each task (the wrapper's child) its own pid.
        _wait_for(lambda: len(_pids(records)) == 3 and len(os.listdir(records)) == 6, RUN_BOUND_SECS, "no records")
        tasks = [int(name.rsplit("-", 1)[1].split(".")[0]) for name in os.listdir(records) if name.endswith(".json")]
        left = _pids(records) + tasks
        assert all(_alive(pid) for pid in left)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=RUN_BOUND_SECS)
        _wait_for(lambda: not any(_alive(pid) for pid in left), 10.0, "a wrapper's child outlived the launcher")
    finally:
        stop(process)
        for pid in left:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
