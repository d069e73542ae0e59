"""What a launch leaves and says, with stand-in tasks (no TensorFlow): run folders, port locks, legacy summaries."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCHER = os.path.join(ROOT, "scripts", "launch_local.py")
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
FAST = ["--grace_secs=1", "--ps_grace_secs=0.5", "--stop_grace_secs=1", "--isolation=none", "--allow_open_ports"]
FAST += ["--nochart"]


def launch(tmp_path, *flags, task=("fake_task.py",)):
    argv = [sys.executable, LAUNCHER, *FAST, *flags, "--", sys.executable, os.path.join(FIXTURES, task[0]), *task[1:]]
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": ROOT}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
    return done.returncode, done.stdout + done.stderr


def test_run_folders_go_under_one_private_parent_and_port_locks_are_removed(tmp_path):
    state = tmp_path / f"ps_toolkit-{os.getuid()}"
    for _ in range(2):
        code, output = launch(tmp_path, task=("fake_task.py", "--ps=exit0", "--steps=2"))
        assert code == 0, output
    runs = sorted(p.name for p in (state / "runs").iterdir())
    assert len(runs) == 2 and all(name.startswith("run-") for name in runs), runs
    assert {p.name for p in tmp_path.iterdir()} == {state.name}  # nothing else in TMPDIR
    assert list((state / "ports").iterdir()) == []
    assert oct(os.stat(state).st_mode & 0o777) == "0o700"


def test_old_run_folders_are_pruned_to_the_newest_20(tmp_path):
    runs = tmp_path / f"ps_toolkit-{os.getuid()}" / "runs"
    runs.mkdir(parents=True, mode=0o700)
    os.chmod(runs.parent, 0o700)
    for index in range(25):
        old = runs / f"run-20200101-0000{index:02d}-old{index:02d}"
        old.mkdir()
        os.utime(old, (1_000_000 + index, 1_000_000 + index))
    code, output = launch(tmp_path, task=("fake_task.py", "--ps=exit0", "--steps=1"))
    assert code == 0, output
    left = sorted(p.name for p in runs.iterdir())
    assert len(left) == 20, left
    assert "run-20200101-000004-old04" not in left and "run-20200101-000024-old24" in left


def test_a_legacy_scripts_last_lines_and_accuracy_reach_the_summary(tmp_path):
    code, output = launch(
        tmp_path, "--success_policy=all_workers", f"--log_dir={tmp_path / 'run'}", task=("legacy_printer.py",)
    )
    assert code == 0, output
    summary = (tmp_path / "run" / "summary.txt").read_text()
    rows = {line.split()[0]: line.split() for line in summary.splitlines() if line.startswith("worker:")}
    assert rows["worker:0"][-1] == "60" and rows["worker:1"][-1] == "61", summary
    assert (
        "worker:0: worker=0, final accuracy = 0.910" in summary
        and "worker:1: worker=1, final accuracy = 0.911" in summary
    )
    assert "(accuracy 0.91, printed by worker:0)" in summary
    assert "last lines:" in output and "printed by worker:0" in output
