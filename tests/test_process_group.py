"""ProcessGroup (ps_toolkit/process/group.py): small ``python -c`` children, exec'd; no TensorFlow."""

import os
import select
import signal
import subprocess
import sys
import time

import psutil
import pytest

from ps_toolkit.process import lifecycle
from ps_toolkit.process.group import ProcessGroup
from ps_toolkit.process.starter import ExecStarter, make_starter

# A child that starts a grandchild, prints the grandchild's pid, and waits forever.
_WITH_GRANDCHILD = (
    "import subprocess, sys, threading\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import threading; threading.Event().wait()'])\n"
    "print(child.pid, flush=True)\n"
    "threading.Event().wait()\n"
)
_IGNORES_SIGTERM = (
    "import signal, threading\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "threading.Event().wait()\n"
)
_FOREVER = "import threading; threading.Event().wait()"


def _group(**kwargs) -> ProcessGroup:
    return ProcessGroup(ExecStarter(), **kwargs)


def _start(group: ProcessGroup, name: str, code: str, stdout=subprocess.DEVNULL):
    return group.start(name, [sys.executable, "-c", code], env=dict(os.environ), stdout=stdout, stderr=None)


def _first_line(group: ProcessGroup, name: str, code: str, timeout_secs: float = 20.0) -> str:
    """Starts ``code`` as ``name`` with its stdout read by the group; returns its first line."""
    chunks = []
    proc = _start(group, name, code, stdout=subprocess.PIPE)
    group.add_pipe(proc.stdout, chunks.append)
    deadline = time.monotonic() + timeout_secs
    while b"\n" not in b"".join(chunks):
        assert time.monotonic() < deadline, f"{name} printed no line: {b''.join(chunks)!r}"
        group.poll(deadline - time.monotonic())
    return b"".join(chunks).decode().splitlines()[0]


def _poll_until(group: ProcessGroup, name: str, timeout_secs: float = 20.0) -> list[list[str]]:
    """Every poll's answer until ``name`` is reported."""
    answers = []
    deadline = time.monotonic() + timeout_secs
    while not any(name in answer for answer in answers):
        assert time.monotonic() < deadline, f"{name}'s exit was not reported: {answers}"
        answers.append(group.poll(deadline - time.monotonic()))
    return answers


def _gone(pid: int, timeout_secs: float = 10.0) -> bool:
    try:
        process = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return True
    _, alive = psutil.wait_procs([process], timeout=timeout_secs)
    return not alive


def test_an_exit_is_reported_once_with_its_status():
    with _group() as group:
        _start(group, "task", "import sys; sys.exit(3)")
        answers = _poll_until(group, "task")
        assert sum(answer.count("task") for answer in answers) == 1
        assert group.returncode("task") == 3 and not group.alive("task")
        assert group.exited_at("task") is not None and group.exited_at("task") <= time.time()
        assert group.poll(0.0) == []
        assert group.names == ["task"]
        assert group.returncode("never started") is None and group.process("never started") is None


def test_an_exit_seen_by_alive_is_still_reported_by_poll():
    with _group() as group:
        proc = _start(group, "task", "pass")
        proc.wait(timeout=20)
        assert not group.alive("task")
        started = time.monotonic()
        assert group.poll(10.0) == ["task"]
        assert time.monotonic() - started < 5.0  # an exit already seen makes poll return at once


def test_reader_callbacks_fire_for_pipes_and_other_fds():
    with _group() as group:
        chunks = []
        proc = _start(group, "task", "print('hello from the task')", stdout=subprocess.PIPE)
        group.add_pipe(proc.stdout, chunks.append)
        assert group.drain(time.monotonic() + 20)
        assert b"".join(chunks) == b"hello from the task\n" and chunks[-1] == b""
        assert proc.stdout.closed
        read_end, write_end = os.pipe()
        try:
            woken = []
            group.add_reader(read_end, lambda: woken.append(os.read(read_end, 16)))
            os.write(write_end, b"x")
            started = time.monotonic()
            group.poll(10.0)
            assert woken == [b"x"] and time.monotonic() - started < 5.0
            group.remove_reader(read_end)
            os.write(write_end, b"y")
            group.poll(0.1)
            assert woken == [b"x"]
        finally:
            os.close(read_end)
            os.close(write_end)


def test_kill_takes_the_descendants():
    with _group() as group:
        grandchild = int(_first_line(group, "task", _WITH_GRANDCHILD))
        group.kill("task")
        assert group.wait(["task"], time.monotonic() + 10) == {"task": -signal.SIGKILL}
        assert _gone(grandchild), "the grandchild outlived the kill of its parent's tree"


def test_stop_gives_the_grace_then_sigkills_a_task_that_ignores_sigterm():
    with _group() as group:
        assert _first_line(group, "stubborn", _IGNORES_SIGTERM) == "ready"
        _start(group, "polite", _FOREVER)
        started = time.monotonic()
        group.stop(["stubborn", "polite"], grace_secs=0.5)
        took = time.monotonic() - started
        assert group.returncode("stubborn") == -signal.SIGKILL
        assert group.returncode("polite") == -signal.SIGTERM
        assert 0.5 <= took < 10.0, took
        assert sorted(group.poll(0.0)) == ["polite", "stubborn"]


def test_close_ends_everything_after_an_exception_in_the_with_block():
    with pytest.raises(RuntimeError, match="boom"), _group(stop_grace_secs=0.5) as group:
        grandchild = int(_first_line(group, "task", _WITH_GRANDCHILD))
        stubborn = _first_line(group, "stubborn", _IGNORES_SIGTERM)
        assert stubborn == "ready"
        raise RuntimeError("boom")
    assert group.returncode("task") == -signal.SIGTERM
    assert group.returncode("stubborn") == -signal.SIGKILL
    assert _gone(grandchild)
    group.close()  # again: nothing left to do
    with pytest.raises(RuntimeError, match="closed"):
        _start(group, "late", "pass")


def test_a_restart_under_the_same_name_replaces_the_process():
    with _group() as group:
        first = _start(group, "task", _FOREVER)
        with pytest.raises(RuntimeError, match="still running"):
            _start(group, "task", "pass")
        group.stop(["task"], grace_secs=5.0)
        second = _start(group, "task", "import sys; sys.exit(4)")
        assert second.pid != first.pid and group.process("task") is second
        answers = _poll_until(group, "task")
        assert sum(answer.count("task") for answer in answers) == 1  # the first run's exit is not reported
        assert group.returncode("task") == 4


def test_poll_waits_no_longer_than_its_bound():
    with _group() as group:
        _start(group, "task", _FOREVER)
        for bound in (0.0, 0.3):
            started = time.monotonic()
            assert group.poll(bound) == []
            took = time.monotonic() - started
            assert bound - 0.05 <= took < bound + 1.0, (bound, took)


def test_wait_stops_at_a_failure_when_asked():
    with _group() as group:
        _start(group, "server", _FOREVER)
        _start(group, "worker", "import sys; sys.exit(2)")
        started = time.monotonic()
        codes = group.wait(["server", "worker"], time.monotonic() + 30, stop_at_failure=True)
        assert codes == {"server": None, "worker": 2} and time.monotonic() - started < 20
        codes = group.wait(["server"], time.monotonic() + 0.2)
        assert codes == {"server": None}


def test_without_pidfds_exits_are_still_seen(monkeypatch):
    monkeypatch.setattr(lifecycle, "pid_fd", lambda popen: None)
    with _group() as group:
        _start(group, "task", "import sys; sys.exit(5)")
        started = time.monotonic()
        first = group.poll(30.0)
        assert time.monotonic() - started < 5.0  # polled at least every FALLBACK_POLL_SECS
        if first != ["task"]:
            _poll_until(group, "task")
        assert group.returncode("task") == 5


def test_on_start_is_told_each_pid():
    pids = []
    with _group(on_start=pids.append) as group:
        proc = _start(group, "task", "pass")
    assert pids == [proc.pid]


def test_waiting_on_one_process_while_another_has_exited_costs_no_cpu():
    with _group() as group:
        _start(group, "forever", _FOREVER)
        early = _start(group, "early", "pass")
        exit_fd = os.pidfd_open(early.pid)
        select.select([exit_fd], [], [], 20)  # exited (not reaped), and not yet seen by the group
        os.close(exit_fd)
        cpu_before = time.process_time()
        codes = group.wait(["forever"], time.monotonic() + 1.0)
        # A pidfd left readable in the selector would make this a busy loop: about 1 s of CPU.
        assert codes == {"forever": None}
        assert time.process_time() - cpu_before < 0.3
        assert group.poll(0) == ["early"], "the exit is still reported, once"


class _RecordingStarter:
    """A starter of a user's own (starter.TaskStarter): execs each command and records what it was asked."""

    def __init__(self):
        self.started = []
        self._exec = ExecStarter()

    def start(self, argv, *, env, stdout, stderr, cwd=None, text=False):
        self.started.append(list(argv))
        return self._exec.start(argv, env=env, stdout=stdout, stderr=stderr, cwd=cwd, text=text)


def test_the_group_starts_and_reaps_through_any_starter_and_its_handles_say_what_ended_them():
    starter = _RecordingStarter()
    with ProcessGroup(starter, stop_grace_secs=0.0) as group:
        proc = _start(group, "task:0", "raise SystemExit(3)")
        _poll_until(group, "task:0")
        assert group.returncode("task:0") == 3
        # Nothing but the task itself ends an exec'd task.
        assert proc.lost_with is None
    assert starter.started == [[sys.executable, "-c", "raise SystemExit(3)"]]


def test_make_starter_names_the_two_start_methods_and_refuses_others():
    assert isinstance(make_starter("exec"), ExecStarter)
    assert make_starter("fork").method == "fork"
    with pytest.raises(ValueError, match="start method 'spawn'; valid: fork, exec"):
        make_starter("spawn")
