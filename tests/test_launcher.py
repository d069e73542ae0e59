"""Fast tests of scripts/launch_local.py with fake tasks (tests/fixtures/fake_task.py): no TensorFlow."""

from __future__ import annotations

import glob
import json
import os
import selectors
import signal
import subprocess
import sys
import time

import psutil
import pytest

from ps_toolkit.launch.ports import reserve_ports

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCHER = os.path.join(ROOT, "scripts", "launch_local.py")
FAKE_TASK = os.path.join(ROOT, "tests", "fixtures", "fake_task.py")
# How the launcher runs the fake task; tests/test_launcher_fork.py runs it through
# scripts/run_legacy.py, which the launcher forks from its fork server.
TASK_COMMAND = [sys.executable, FAKE_TASK]
# Short grace periods keep these tests fast; the defaults are for real jobs.
# The chart is drawn only where a test looks at it: matplotlib costs each launch CPU time the suite is short of.
FAST = ["--grace_secs=1", "--ps_grace_secs=0.5", "--stop_grace_secs=1", "--nochart"]
BOUND_SECS = 60


def launcher_argv(flags, fake_args, tmp_path):
    return [sys.executable, LAUNCHER, f"--log_dir={tmp_path / 'run'}", *FAST, *flags, "--"] + [
        *TASK_COMMAND,
        f"--record_dir={tmp_path}",
        *fake_args,
    ]


def explain(argv, code, output):
    return f"command: {' '.join(argv)}\nexit code: {code}\noutput:\n{output}"


def run_launcher(flags, fake_args, tmp_path, timeout=BOUND_SECS):
    """Runs the launcher to its end; returns (exit code, stdout+stderr, stderr, argv)."""
    argv = launcher_argv(flags, fake_args, tmp_path)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired as err:
        pytest.fail(explain(argv, "timeout", f"{err.stdout}\n{err.stderr}"))
    return done.returncode, done.stdout + done.stderr, done.stderr, argv


def records(tmp_path):
    """What each fake task wrote at start: pid, argv, TF_CONFIG."""
    found = []
    for path in sorted(glob.glob(str(tmp_path / "*-*-*.json"))):
        with open(path) as handle:
            found.append(json.load(handle))
    return found


def all_pids(tmp_path):
    pids = [r["pid"] for r in records(tmp_path)]
    for path in glob.glob(str(tmp_path / "grandchild-*.json")):
        with open(path) as handle:
            pids.append(json.load(handle)["pid"])
    return pids


def assert_all_gone(pids, context):
    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=10)
    alive = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    for proc in alive:
        proc.kill()  # the test's own cleanup: nothing it caused outlives it
    assert not alive, f"processes left running: {alive}\n{context}"


def flag_value(argv, name):
    prefix = f"--{name}="
    return next(a[len(prefix) :] for a in reversed(argv) if a.startswith(prefix))


class Launch:
    """A launcher started in the background whose output is read as it comes."""

    def __init__(self, flags, fake_args, tmp_path):
        self.argv = launcher_argv(flags, fake_args, tmp_path)
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT)
        self.output = ""

    def read_until(self, predicate, timeout=BOUND_SECS):
        """Reads output until ``predicate(output)``; fails the test at the bound."""
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ)
            while not predicate(self.output):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not selector.select(timeout=remaining):
                    pytest.fail(explain(self.argv, "still running", self.output))
                data = os.read(self.proc.stdout.fileno(), 65536)
                if not data:
                    pytest.fail(explain(self.argv, self.proc.wait(timeout=10), self.output))
                self.output += data.decode("utf-8", "replace")

    def finish(self, timeout=BOUND_SECS):
        try:
            rest, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rest, _ = self.proc.communicate(timeout=10)
            pytest.fail(explain(self.argv, "timeout", self.output + rest.decode()))
        self.output += rest.decode("utf-8", "replace")
        return self.proc.returncode, self.output

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate(timeout=10)


@pytest.fixture
def background(tmp_path):
    started = []

    def start(flags, fake_args):
        launch = Launch(flags, fake_args, tmp_path)
        started.append(launch)
        return launch

    yield start
    for launch in started:
        launch.close()
    assert_all_gone(all_pids(tmp_path), "after the test")


def started_all(count):
    return lambda output: output.count(" starting") >= count


# Success and teardown.
def test_chief_success_stops_a_ps_that_blocks_forever(tmp_path):
    # worker:1 ends by itself, however late its start: the grace period is not what this shows.
    code, output, _, argv = run_launcher(["--grace_secs=60", "--chart"], ["--steps=5"], tmp_path)
    assert code == 0, explain(argv, code, output)
    assert "succeeded: the chief (worker:0) finished with status 0" in output, explain(argv, code, output)
    summary = (tmp_path / "run" / "summary.txt").read_text()
    assert "SIGTERM (stopped)" in summary and summary.count("0 (finished)") == 2, summary
    assert (tmp_path / "run" / "progress.png").stat().st_size > 0
    assert f"launcher: chart {tmp_path / 'run' / 'progress.png'}" in output, explain(argv, code, output)
    log = (tmp_path / "run" / "worker-1.log").read_text()
    assert "ps_toolkit progress:" in log and "a line on stderr" in log, log
    assert "[worker:1] worker:1 starting" in output, explain(argv, code, output)
    assert_all_gone(all_pids(tmp_path), explain(argv, code, output))


def test_nochart_draws_no_chart(tmp_path):
    code, output, _, argv = run_launcher([], ["--steps=5"], tmp_path)  # FAST says --nochart
    assert code == 0, explain(argv, code, output)
    assert "ps_toolkit progress:" in (tmp_path / "run" / "worker-0.log").read_text()  # there was a chart to draw
    assert not (tmp_path / "run" / "progress.png").exists()
    assert "launcher: chart" not in output, explain(argv, code, output)


def test_quiet_shows_no_task_lines(tmp_path):
    code, output, _, argv = run_launcher(["--quiet"], [], tmp_path)
    assert code == 0, explain(argv, code, output)
    assert "[worker:0]" not in output and "exit status" in output, explain(argv, code, output)


def test_worker_left_behind_is_stopped_after_the_grace_period(tmp_path):
    code, output, _, argv = run_launcher([], ["--hang=worker:1"], tmp_path)
    assert code == 0, explain(argv, code, output)
    rows = {line.split()[0]: line for line in output.splitlines() if line.startswith(("ps:", "worker:"))}
    assert "(stopped)" in rows["worker:1"] and "0 (finished)" in rows["worker:0"], output
    assert_all_gone(all_pids(tmp_path), output)


def test_all_workers_policy_fails_when_a_non_chief_fails(tmp_path):
    flags = ["--success_policy=all_workers"]
    code, output, _, argv = run_launcher(flags, ["--fail=worker:1", "--steps=200", "--step_secs=0.02"], tmp_path)
    assert code == 1, explain(argv, code, output)
    assert "FAILED: worker:1" in output, explain(argv, code, output)


def test_worker_failure_tears_down_the_cluster_and_names_the_task(tmp_path):
    fake = ["--fail=worker:1", "--fail_status=7", "--steps=100000", "--step_secs=0.05", "--grandchild"]
    code, output, stderr, argv = run_launcher([], fake, tmp_path)
    assert code == 7, explain(argv, code, output)
    failure = output[output.index("FAILED:") :]
    assert "worker:1" in failure and "status 7" in failure, explain(argv, code, output)
    assert "worker:1 is about to fail" in failure, "the last log lines are shown\n" + output
    assert_all_gone(all_pids(tmp_path), explain(argv, code, output))


def test_tasks_that_ignore_sigterm_are_killed(tmp_path):
    # worker:1 fails once every task ignores SIGTERM: a task stopped earlier would need no SIGKILL.
    fake = ["--fail=worker:1", "--fail_when_started=3", "--ignore_sigterm", "--steps=100000", "--step_secs=0.05"]
    code, output, _, argv = run_launcher([], fake, tmp_path)
    assert code == 1, explain(argv, code, output)
    assert "SIGKILL (stopped)" in output, explain(argv, code, output)
    assert_all_gone(all_pids(tmp_path), explain(argv, code, output))


def test_timeout_stops_everything(tmp_path):
    code, output, _, argv = run_launcher(["--timeout_secs=1"], ["--hang=worker:0"], tmp_path)
    assert code == 1 and "did not end within --timeout_secs=1" in output, explain(argv, code, output)
    assert_all_gone(all_pids(tmp_path), explain(argv, code, output))


# Restart policy and chaos drills.
def test_on_failure_restarts_the_task_in_place(tmp_path):
    (tmp_path / "once").mkdir()
    fake = ["--fail=worker:1", f"--once_dir={tmp_path / 'once'}", "--steps=20", "--step_secs=0.05"]
    flags = ["--restart=on-failure", "--max_restarts=2", "--success_policy=all_workers"]
    code, output, _, argv = run_launcher(flags, fake, tmp_path)
    assert code == 0, explain(argv, code, output)
    assert "restarting it on localhost:" in output, explain(argv, code, output)
    starts = [r for r in records(tmp_path) if flag_value(r["argv"], "job_name") == "worker"]
    worker1 = [r for r in starts if flag_value(r["argv"], "task_index") == "1"]
    assert len(worker1) == 2 and worker1[0]["argv"] == worker1[1]["argv"], worker1
    row = next(line for line in output.splitlines() if line.startswith("worker:1 "))
    assert row.split()[4] == "1", f"one restart in the summary: {row}"


def test_restarts_are_bounded(tmp_path):
    flags = ["--restart=on-failure", "--max_restarts=2"]
    code, output, _, argv = run_launcher(flags, ["--fail=worker:1", "--steps=100000", "--step_secs=0.05"], tmp_path)
    assert code == 1, explain(argv, code, output)
    assert "(2/2)" in output and "FAILED: worker:1" in output, explain(argv, code, output)
    assert len([r for r in records(tmp_path) if "--task_index=1" in r["argv"]]) == 3


def test_config_errors_are_not_restarted(tmp_path):
    flags = ["--restart=on-failure", "--max_restarts=2"]
    fake = ["--fail=worker:1", "--fail_status=2", "--steps=100000", "--step_secs=0.05"]
    code, output, _, argv = run_launcher(flags, fake, tmp_path)
    assert code == 2 and "restarting" not in output, explain(argv, code, output)


def test_kill_drill_with_restart_brings_the_ps_back(tmp_path):
    flags = ["--kill=ps:0@0.5s", "--restart=on-failure"]
    code, output, _, argv = run_launcher(flags, ["--steps=200", "--step_secs=0.05"], tmp_path)
    assert code == 0, explain(argv, code, output)
    assert "--kill drill: SIGKILL ps:0" in output, explain(argv, code, output)
    assert "ps:0 was killed by SIGKILL (--kill drill); restarting" in output, explain(argv, code, output)
    # The drill may kill the first ps before it wrote its record (a forked task waits for the
    # fork server's import); the restarted one ran the same command.
    ps_starts = [r for r in records(tmp_path) if "--job_name=ps" in r["argv"]]
    assert ps_starts and all(r["argv"] == ps_starts[0]["argv"] for r in ps_starts), ps_starts
    ps_log = (tmp_path / "run" / "ps-0.log").read_text()
    first, restart = ps_log.split("--- start: ")[1], ps_log.split("--- restart 1: ")[1]
    assert first.split(" ---")[0] == restart.split(" ---")[0], ps_log


def test_kill_drill_without_restart_fails_the_run(tmp_path):
    code, output, _, argv = run_launcher(["--kill=worker:0@0.3s"], ["--steps=100000", "--step_secs=0.05"], tmp_path)
    assert code == 1, explain(argv, code, output)
    assert "worker:0 (localhost:" in output and "killed by SIGKILL (--kill drill)" in output, output
    assert_all_gone(all_pids(tmp_path), output)


# Signals.
@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 128 + 15), (signal.SIGINT, 128 + 2)])
def test_signal_to_the_launcher_stops_every_task(background, tmp_path, sig, status):
    launch = background([], ["--hang=worker:0,worker:1", "--grandchild", "--ignore_sigterm"])
    launch.read_until(started_all(3))
    launch.proc.send_signal(sig)
    code, output = launch.finish()
    assert code == status, explain(launch.argv, code, output)
    assert f"got {signal.Signals(sig).name}; stopping every task" in output, output
    assert_all_gone(all_pids(tmp_path), output)


def test_sigkill_of_the_launcher_leaves_no_orphans(background, tmp_path):
    launch = background([], ["--hang=worker:0,worker:1"])
    launch.read_until(started_all(3))
    pids = all_pids(tmp_path)
    assert len(pids) == 3, launch.output
    launch.proc.kill()
    launch.proc.wait(timeout=10)
    assert_all_gone(pids, launch.output)


# Ports and addresses.
def test_concurrent_launches_use_disjoint_ports(tmp_path):
    launches = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        launches.append(Launch([], ["--steps=20", "--step_secs=0.05"], tmp_path / name))
    try:
        results = [launch.finish() for launch in launches]
    finally:
        for launch in launches:
            launch.close()
    for launch, (code, output) in zip(launches, results, strict=True):
        assert code == 0, explain(launch.argv, code, output)
    ports = []
    for name in ("a", "b"):
        cluster = json.loads(records(tmp_path / name)[0]["tf_config"])["cluster"]
        ports.append({address for hosts in cluster.values() for address in hosts})
    assert len(ports[0]) == 3 and ports[0].isdisjoint(ports[1]), ports


def test_command_mode_appends_cluster_flags_and_sets_tf_config(tmp_path):
    # Every task starts before the chief's steps (the others are stopped a second after it ends).
    code, output, _, argv = run_launcher(["--chief", "--evaluator", "--num_ps=2"], ["--start_after=6"], tmp_path)
    assert code == 0, explain(argv, code, output)
    seen = {}
    for record in records(tmp_path):
        job, index = flag_value(record["argv"], "job_name"), int(flag_value(record["argv"], "task_index"))
        tf_config = json.loads(record["tf_config"])
        assert tf_config["task"] == {"type": job, "index": index}, record
        for name, hosts in tf_config["cluster"].items():
            assert flag_value(record["argv"], f"{name}_hosts") == ",".join(hosts), record
        seen[(job, index)] = tf_config["cluster"][job][index]
    assert set(seen) == {("ps", 0), ("ps", 1), ("chief", 0), ("worker", 0), ("worker", 1), ("evaluator", 0)}
    assert all(a.startswith("localhost:") for a in seen.values()) and len(set(seen.values())) == 6, seen
    assert "the chief (chief:0) finished" in output, output


def test_explicit_hosts_are_used_as_given(tmp_path):
    with reserve_ports(3) as reservation:
        ps, w0, w1 = (f"localhost:{port}" for port in reservation.ports)
        flags = [f"--ps_hosts={ps}", f"--worker_hosts={w0},{w1}"]
        code, output, _, argv = run_launcher(flags, [], tmp_path)
    assert code == 0, explain(argv, code, output)
    worker_flags = {flag_value(r["argv"], "worker_hosts") for r in records(tmp_path)}
    assert worker_flags == {f"{w0},{w1}"}, worker_flags


def test_port_in_use_relaunches_the_cluster_on_new_ports(tmp_path):
    (tmp_path / "once").mkdir()
    fake = ["--port_in_use=worker:0", f"--once_dir={tmp_path / 'once'}"]
    code, output, _, argv = run_launcher([], fake, tmp_path)
    assert code == 0, explain(argv, code, output)
    assert "relaunching the cluster on new ports" in output, output
    clusters = {flag_value(r["argv"], "worker_hosts") for r in records(tmp_path)}
    assert len(clusters) == 2, clusters


def test_port_in_use_with_explicit_hosts_is_not_retried(tmp_path):
    with reserve_ports(2) as reservation:
        ps, worker = (f"localhost:{port}" for port in reservation.ports)
        flags = [f"--ps_hosts={ps}", f"--worker_hosts={worker}"]
        code, output, _, argv = run_launcher(flags, ["--port_in_use=worker:0"], tmp_path)
    assert code == 4 and "relaunching" not in output, explain(argv, code, output)
    assert "already in use" in output, output


# Bad input.
@pytest.mark.parametrize(
    "flags, expected",
    [
        (["--num_workers=two"], "num_workers"),
        (["--kill=ps0@5"], "--kill='ps0@5'"),
        (["--kill=worker:5@1s"], "no task worker:5"),
        (["--success_policy=most"], "success_policy"),
        (["--restart=always"], "restart"),
        (["--num_workers=0"], "--num_workers=0"),
        (["--worker_hosts=localhost"], "localhost"),
        (["--ps_hosts=localhost:1", "--worker_hosts=localhost:1"], "used twice"),
        (["--num_ps=2", "--worker_hosts=localhost:2"], "--num_ps"),
        (["stray"], "unexpected argument 'stray'"),
        (["--max_restarts=-1"], "--max_restarts=-1 is outside"),
    ],
)
def test_bad_flags_give_one_line_and_status_2(tmp_path, flags, expected):
    argv = [sys.executable, LAUNCHER, f"--log_dir={tmp_path}", *flags]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=BOUND_SECS, cwd=ROOT)
    context = explain(argv, done.returncode, done.stdout + done.stderr)
    assert done.returncode == 2, context
    assert len(done.stderr.strip().splitlines()) == 1 and expected in done.stderr, context
    assert "Traceback" not in done.stderr and not records(tmp_path), context


def test_training_flags_with_a_command_are_refused(tmp_path):
    argv = [sys.executable, LAUNCHER, "--train_steps=5", "--", sys.executable, FAKE_TASK]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=BOUND_SECS, cwd=ROOT)
    assert done.returncode == 2 and "--train_steps" in done.stderr, explain(argv, done.returncode, done.stderr)


def test_a_command_that_cannot_start_is_a_config_error(tmp_path):
    argv = [sys.executable, LAUNCHER, f"--log_dir={tmp_path}", "--nochart", "--", str(tmp_path / "no_such_program")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=BOUND_SECS, cwd=ROOT)
    context = explain(argv, done.returncode, done.stdout + done.stderr)
    assert done.returncode == 2 and "cannot start ps:0" in done.stdout, context
    assert "Traceback" not in done.stderr, context
