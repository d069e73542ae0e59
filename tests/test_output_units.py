"""Units of the launcher's output path: the best-effort console, tolerant task streams, log tails, the reaper."""

import fcntl
import os
import select
import subprocess
import sys
import threading
import time

import psutil
import pytest

from ps_toolkit.launch.console_stream import BestEffortStream
from ps_toolkit.launch.task_output import LOG, LogTail, TaskOutput
from ps_toolkit.process import lifecycle
from ps_toolkit.task import tolerant_streams


class _Pipe:
    """The write end of a pipe, as a text stream (what sys.stdout is under ``| reader``)."""

    def __init__(self):
        self.read_fd, self.write_fd = os.pipe()

    def isatty(self):
        return False

    def fileno(self):
        return self.write_fd

    def flush(self):
        pass

    def close(self):
        for fd in (self.read_fd, self.write_fd):
            try:
                os.close(fd)
            except OSError:
                pass


def test_writes_to_a_reader_that_never_reads_return_at_once_and_drop_past_the_bound():
    pipe = _Pipe()
    try:
        stream = BestEffortStream(pipe, limit_bytes=200_000)
        started = time.monotonic()
        for index in range(20_000):  # 2 MB: 30 times what the pipe holds
            stream.write(f"line {index:05d} " + "x" * 88 + "\n")
            stream.flush()
        stream.close(timeout_secs=0.5)
        assert time.monotonic() - started < 10.0
        assert stream.gone is None
    finally:
        pipe.close()


def test_a_reader_that_resumes_gets_what_was_queued_and_how_many_lines_were_dropped():
    pipe = _Pipe()
    pipe_holds = fcntl.fcntl(pipe.read_fd, fcntl.F_GETPIPE_SZ)
    received = bytearray()
    resumed = threading.Event()

    def read_until_last(deadline: float) -> None:
        while b"last\n" not in received and time.monotonic() < deadline:
            ready, _, _ = select.select([pipe.read_fd], [], [], 0.1)
            if ready:
                received.extend(os.read(pipe.read_fd, 1 << 16))
            if len(received) > pipe_holds + 1_000:
                resumed.set()

    try:
        stream = BestEffortStream(pipe, limit_bytes=100_000)
        for index in range(3_000):  # 300 KB: more than the pipe and the queue hold together
            stream.write(f"{index:05d} " + "y" * 94 + "\n")
        stream.flush()
        reader = threading.Thread(target=read_until_last, args=(time.monotonic() + 30.0,))
        reader.start()
        # Once the reader has taken more than the pipe holds, lines have left the queue, so it has
        # room again: the next line is queued, after the note that counts the lines dropped.
        assert resumed.wait(30.0), f"the reader got only {len(received)} bytes"
        stream.write("last\n")
        stream.flush()
        reader.join(35.0)
        stream.close(timeout_secs=5.0)
        text = received.decode()
        assert text.startswith("00000 ") and text.endswith("last\n")
        assert "the console reader was too slow:" in text
    finally:
        pipe.close()


def test_a_reader_that_has_gone_ends_the_echo_without_an_error():
    pipe = _Pipe()
    os.close(pipe.read_fd)
    saved = os.dup(pipe.write_fd)
    try:
        stream = BestEffortStream(pipe)
        stream.write("nobody reads this\n")
        stream.flush()
        stream.close(timeout_secs=5.0)
        assert stream.gone is not None and stream.gone.errno == 32
        os.write(pipe.write_fd, b"x")  # the descriptor now points at /dev/null: no EPIPE at exit
    finally:
        os.close(saved)
        pipe.close()


def test_tolerant_task_streams_drop_writes_on_a_full_disk():
    """/dev/full answers every write with ENOSPC, as a full log folder does."""
    code = (
        "import os, sys\n"
        "from ps_toolkit.task import tolerant_streams\n"
        "full = os.open('/dev/full', os.O_WRONLY)\n"
        "os.dup2(full, 1)\n"
        "os.dup2(full, 2)\n"
        "tolerant_streams.install()\n"
        "for _ in range(10000):\n"
        "    print('x' * 100)\n"
        "print('done', file=sys.stderr, flush=True)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    done = subprocess.run([sys.executable, "-c", code], env=env, timeout=60)
    assert done.returncode == 0
    plain = subprocess.run([sys.executable, "-c", code.replace("tolerant_streams.install()", "")], env=env, timeout=60)
    assert plain.returncode != 0  # Python's own streams die of it


def test_tolerant_streams_still_raise_other_errors(tmp_path):
    read_fd, write_fd = os.pipe()
    os.close(read_fd)
    stream = tolerant_streams.tolerant(sys.stdout, write_fd)
    try:
        with pytest.raises(BrokenPipeError):
            stream.write("x\n")
            stream.flush()
    finally:
        os.close(write_fd)


def test_a_log_tail_reads_what_the_task_appends_and_skips_the_launchers_notes(tmp_path):
    path = tmp_path / "worker-0.log"
    path.write_bytes(b"from an earlier run\n")
    echoed = []
    log = open(path, "ab", buffering=0)  # noqa: SIM115 - closed by the output
    output = TaskOutput("worker:0", log, echoed.append, tailed=True)
    tail = LogTail(str(path), output)
    output.note("start: task")
    os.write(log.fileno(), b'plain\nps_toolkit progress: {"global_step": 4}\n')
    os.write(log.fileno(), b'{"local_steps": 2, "final_loss": 0.5}\nW0000 00:00:1.5   1 grpc.cc:1] noise\n')
    tail.finish()
    output.close()
    assert echoed == ["[worker:0] plain", '[worker:0] {"local_steps": 2, "final_loss": 0.5}']
    assert output.progress == [{"global_step": 4}] and output.result == {"local_steps": 2, "final_loss": 0.5}
    assert path.read_text().splitlines()[:2] == ["from an earlier run", "--- start: task ---"]
    assert LOG == "log"


def test_a_backlog_at_the_end_is_skipped_but_for_its_last_part(tmp_path, monkeypatch):
    monkeypatch.setattr("ps_toolkit.launch.task_output.FINISH_BYTES", 10_000)
    monkeypatch.setattr("ps_toolkit.launch.task_output.TAIL_KEEP_BYTES", 1_000)
    path = tmp_path / "log"
    path.write_bytes(b"")
    echoed = []
    output = TaskOutput("worker:0", open(path, "ab", buffering=0), echoed.append, tailed=True)  # noqa: SIM115
    tail = LogTail(str(path), output)
    with open(path, "ab") as task:
        task.write(b"".join(b"line %05d\n" % index for index in range(5_000)))
    tail.finish()
    output.close()
    assert "bytes of output not shown here" in echoed[0] and echoed[-1] == "[worker:0] line 04999"
    assert 80 < len(echoed) < 102


def test_stop_trees_reaches_an_orphan_in_the_tasks_session():
    """A task's child that left its process group and outlives the task (off the task's tree) is still stopped."""
    code = "import subprocess; p = subprocess.Popen(['sleep', '600'], process_group=0); print(p.pid, flush=True)"
    task = lifecycle.spawn([sys.executable, "-c", code], env=os.environ, stdout=subprocess.PIPE, stderr=None)
    orphan = int(task.stdout.readline())
    task.wait(timeout=30)
    task.stdout.close()
    try:
        assert psutil.Process(orphan).status() != psutil.STATUS_ZOMBIE
        lifecycle.stop_trees([task], 1.0)
        assert not psutil.pid_exists(orphan) or psutil.Process(orphan).status() == psutil.STATUS_ZOMBIE
    finally:
        if psutil.pid_exists(orphan):
            os.kill(orphan, 9)


def test_the_reaper_kills_the_sessions_it_was_told_of_when_its_pipe_closes():
    victim = subprocess.Popen(["sleep", "600"], start_new_session=True)
    reaper = lifecycle.RunReaper()
    try:
        reaper.add(victim.pid)
        reaper.close()
        assert victim.wait(timeout=10) == -9
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait()


def test_the_merged_log_shows_what_the_separate_streams_showed():
    """A hidden message's next lines come in its own write; the task's print after it, read later, is shown."""
    echoed = []
    output = TaskOutput("worker:0", open(os.devnull, "ab", buffering=0), echoed.append, tailed=True)  # noqa: SIM115
    warning = b"W1123 06:12:58.910455 1398 deprecation.py:50] From x.py:67: calling\nInstructions for updating:\n"
    output.feed(LOG, warning + b"back_prop=False is deprecated.\n")
    output.feed(LOG, b"Step: 100, accuracy 0.91\n")  # a legacy script's print, a read later
    grpc = b"W0000 00:00:1795414382.050966   11283 master_session.cc:2166] UNAVAILABLE: Socket closed\n"
    output.feed(LOG, grpc + b"Additional GRPC error information from remote target /job:ps\n")
    output.feed(LOG, b"INFO:tensorflow:Graph was finalized.\n")  # TensorFlow's logging in Python's format
    output.feed(LOG, grpc + b'{"job": "worker", "task": 0, "local_steps": 580, "final_loss": 0.1}\n')  # in one read
    output.close()
    assert echoed == [
        "[worker:0] Step: 100, accuracy 0.91",
        '[worker:0] {"job": "worker", "task": 0, "local_steps": 580, "final_loss": 0.1}',
    ]
    assert output.result == {"job": "worker", "task": 0, "local_steps": 580, "final_loss": 0.1}
    assert output.printed_accuracy == 0.91


def test_a_ps_result_after_shutdown_noise_in_the_same_read_is_its_last_line():
    echoed = []
    output = TaskOutput("ps:0", open(os.devnull, "ab", buffering=0), echoed.append, tailed=True)  # noqa: SIM115
    noise = b"I0000 00:00:1795426745.1   27241 grpc_server_lib.cc:1] Server shutting down\n  more of it\n"
    output.feed(LOG, noise + b'{"job": "ps", "task": 0, "replicas_done": 2}\n')
    output.close()
    assert echoed == ['[ps:0] {"job": "ps", "task": 0, "replicas_done": 2}']
    assert output.last_stdout_line == '{"job": "ps", "task": 0, "replicas_done": 2}'


def test_a_scripts_print_right_after_a_hidden_message_in_the_same_read_is_shown():
    """TensorFlow's deprecation warning and the legacy script's first print arrive in one read."""
    echoed = []
    output = TaskOutput("ps:0", open(os.devnull, "ab", buffering=0), echoed.append, tailed=True)  # noqa: SIM115
    warning = (
        b"WARNING:tensorflow:From v2_compat.py:98: disable_resource_variables is deprecated.\n"
        b"Instructions for updating:\nnon-resource variables are not supported in the long term\n"
    )
    output.feed(LOG, warning + b"ps:0 starting\n")
    output.close()
    assert echoed == ["[ps:0] ps:0 starting"]


def test_the_result_is_the_last_result_line_of_the_current_run_even_with_warnings_after_it():
    echoed = []
    output = TaskOutput("worker:0", open(os.devnull, "ab", buffering=0), echoed.append, tailed=True)  # noqa: SIM115
    output.note("start: python run_task.py")
    output.feed(LOG, b"--- start: python run_task.py ---\n")
    output.feed(LOG, b'{"job": "worker", "task": 0, "local_steps": 38, "final_loss": 0.29}\n')
    output.feed(LOG, b"model.py:50: UserWarning: `tf.layers.dense` is deprecated\n  net = dense(net)\n")
    assert output.result == {"job": "worker", "task": 0, "local_steps": 38, "final_loss": 0.29}
    output.note("restart 1: python run_task.py")
    output.feed(LOG, b"--- restart 1: python run_task.py ---\nTraceback (most recent call last):\n")
    output.close()
    assert output.result is None  # the restarted run printed no result
