"""The fork server: one process that imports TensorFlow once, then forks each task from that state.

    python -m ps_toolkit.process.fork_server FD [MODULE ...]     # a launch's own server (fork_client starts it)
    python -m ps_toolkit.process.fork_server --listen PATH      # the host's server, shared by every launch

Importing TensorFlow costs seconds of CPU; a cluster of N local tasks started
fresh pays it N times. This process pays it once: it imports TensorFlow, the
toolkit's training modules and the compat layer (plus any MODULE given), then
answers requests on the Unix socket FD. Each ``fork`` request makes a child
that runs one Python command exactly as ``python SCRIPT ARGS`` would (see
``fork_child``), and each child's exit status is sent back when it ends.

Forking is only safe while TensorFlow's runtime has not started: no thread
pool, eager context or session may exist in the parent, or the child would
inherit locks held by threads it does not have. The guard checks this after
the imports and before every fork; when it fails, the server answers
``refused`` with the reason and the client starts its tasks with exec.

Messages are JSON objects, one per SOCK_SEQPACKET datagram (fork_protocol).
A launch's own server ends when its client closes the socket, SIGKILLing any
child still running; it dies with the process that started it
(PR_SET_PDEATHSIG), and its children die with it.

The host's server (``--listen PATH``) pays the import once for every launch
on the host: each launch whose environment names it (``PS_TOOLKIT_FORK_SERVER``,
fork_client) connects to it instead of starting its own. It serves each client
as a launch's own server would: when a client goes, however it goes, its
tasks are SIGKILLed. Only processes of this server's user may connect, and its
socket must lie in a folder only that user can write (``host_socket``); while it
imports, it tells each client so at once (a client bypasses a silent server). It
prints a line once it listens (or why it cannot: exit 2), one once its
imports are done (clients that connect before wait for them), and serves
until SIGTERM or SIGINT, which end its tasks and remove PATH.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import importlib
import os
import select
import selectors
import signal
import socket
import sys
import warnings

from ps_toolkit.base import tf_import, tf_internals
from ps_toolkit.base.errors import ConfigError
from ps_toolkit.base.paths import PACKAGE_PARENT
from ps_toolkit.process import fork_child, fork_protocol, host_socket, python_path

# Threads that TensorFlow 2.21's ``import tensorflow`` starts (after numpy's
# OpenBLAS pool, which is counted before it and is fork-safe: it re-creates
# itself in the child through pthread_atfork). More than this after the
# imports means TensorFlow's runtime has started.
TF_IMPORT_THREADS = 1
# What every server imports before its first fork: TensorFlow, the toolkit's
# task path (scripts/run_task.py) and the compat layer (scripts/run_legacy.py).
PRELOAD = (
    "tensorflow",
    "absl.app",
    "ps_toolkit.cli",
    "ps_toolkit.task.runner",
    "ps_toolkit.task.roles.trainer",
    "ps_toolkit.models.classifiers",
    "ps_toolkit.training.model_check",
    "ps_toolkit.training.export",
    "ps_toolkit_compat.legacy_tf",
)
# How long the one refusal of a server that cannot fork waits for its client to read it.
_SEND_TIMEOUT_SECS = 10.0
# A forked child takes microseconds to lead its session; this only bounds a child that never does.
_CHILD_START_SECS = 10.0


def thread_count() -> int:
    """OS threads of this process (Python's own count misses threads started by C++)."""
    return len(os.listdir("/proc/self/task"))


def runtime_started(allowed_threads: int) -> str | None:
    """Why forking is unsafe now (TensorFlow's runtime has started), or None when it is safe."""
    threads = thread_count()
    if threads > allowed_threads:
        return f"{threads} threads where at most {allowed_threads} are expected"
    if tf_internals.eager_runtime_started():
        return "an eager context has been created"
    return None


class _Connection:
    """One client: its socket, the children it asked for, and what it has not read yet.

    Sends never block: one client that stops reading must not stall the others. What
    its socket cannot take now waits in ``pending`` (sent when it is writable again);
    past ``MAX_PENDING`` messages the client is dropped, and its tasks with it.
    """

    MAX_PENDING = 10_000

    def __init__(self, sock: socket.socket):
        sock.setblocking(False)
        self.sock = sock
        self.children: set[int] = set()
        self.pending: collections.deque[bytes] = collections.deque()
        self.gone = False

    def send(self, message: dict) -> None:
        self.pending.append(fork_protocol.encode(message))
        self.flush()

    def flush(self) -> None:
        """Sends what the socket takes now; marks the client gone if it has left or fallen too far behind."""
        while self.pending and not self.gone:
            try:
                self.sock.send(self.pending[0])
            except BlockingIOError:
                break
            except OSError:  # the client has gone
                self.gone = True
                return
            self.pending.popleft()
        if len(self.pending) > self.MAX_PENDING:
            self.gone = True


class _Server:
    """Forks tasks for its clients: one (a socket pair, ``serve_one``) or any number (``serve_listening``)."""

    def __init__(self):
        self._selector = selectors.DefaultSelector()
        self._children: dict[int, tuple[int, _Connection | None]] = {}  # pid -> (pidfd, its client)
        self._connections: list[_Connection] = []
        self._listener: socket.socket | None = None
        self._allowed_threads = 0
        # What a client compares with its tasks' environment: this process's own, before the imports change it.
        self._imported_under = [list(item) for item in fork_protocol.import_key(os.environ)]
        self._path_entries = python_path.entries(os.environ.get("PYTHONPATH", ""), os.getcwd())

    def prepare(self, modules: list[str]) -> str | None:
        """Imports everything a task needs; why forking is unsafe afterwards, or None."""
        # As scripts/run_task.py and run_legacy.py do before their import (fork_client.forkable
        # keeps a legacy script whose environment says otherwise on exec).
        tf_import.prefer_lean_import()
        import numpy  # noqa: F401 - its thread pool is counted before TensorFlow's

        self._allowed_threads = thread_count() + TF_IMPORT_THREADS
        for name in (*PRELOAD, *modules):
            try:
                importlib.import_module(name)
            except Exception as err:  # any import failure: clients fall back to exec, which reports it
                return f"the fork server cannot import {name}: {err}"
        refusal = runtime_started(self._allowed_threads)
        if refusal:
            return f"TensorFlow's runtime has already started in the fork server: {refusal}"
        return None

    def serve_one(self, sock: socket.socket) -> None:
        """Serves the client at the other end of ``sock`` until it closes it."""
        connection = self._add(sock)
        while connection in self._connections:
            self._serve_events()

    def serve_listening(self, listener: socket.socket, accepted: list[socket.socket]) -> None:
        """Serves the clients ``accepted`` while importing, then accepts clients on ``listener`` and serves
        each until it goes; never returns (signals end it)."""
        self._listener = listener
        for sock in accepted:
            self._add(sock)
        self._selector.register(listener, selectors.EVENT_READ, "accept")
        while True:
            self._serve_events()

    def _serve_events(self) -> None:
        for key, events in self._selector.select():
            if key.data == "accept":
                self._accept()
            elif isinstance(key.data, _Connection):
                connection = key.data
                try:
                    if events & selectors.EVENT_WRITE:
                        connection.flush()
                    if events & selectors.EVENT_READ and not connection.gone:
                        self._handle_request(connection)
                except Exception:  # noqa: BLE001 - a client's request, whatever it did, costs that client only
                    connection.gone = True
            else:
                self._on_exit(key.data)
        for connection in list(self._connections):
            self._settle(connection)

    def _settle(self, connection: _Connection) -> None:
        """Drops a client that has gone; asks to be told when a slow one can take more."""
        if connection.gone:
            self._drop(connection)
            return
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if connection.pending else 0)
        self._selector.modify(connection.sock, events, connection)

    def _add(self, sock: socket.socket) -> _Connection:
        connection = _Connection(sock)
        self._connections.append(connection)
        self._selector.register(sock, selectors.EVENT_READ, connection)
        connection.send(
            {
                "ready": os.getpid(),
                "import_key": self._imported_under,
                "executable": os.path.realpath(sys.executable),
                "package_parent": PACKAGE_PARENT,
                "mount_namespace": os.stat("/proc/self/ns/mnt").st_ino,
            }
        )
        return connection

    def _accept(self) -> None:
        # Only this user's processes may ask for a task (the socket's folder is private too).
        sock = host_socket.accept_own(self._listener)
        if sock is not None:
            self._add(sock)

    def _drop(self, connection: _Connection) -> None:
        """The client has gone: its tasks go with it, as they would with a server of their own."""
        connection.gone = True
        self._selector.unregister(connection.sock)
        self._connections.remove(connection)
        connection.sock.close()
        for pid in connection.children:
            _kill_group(pid)
            pidfd, _ = self._children[pid]
            self._children[pid] = (pidfd, None)  # reaped when its exit is seen

    def _handle_request(self, connection: _Connection) -> None:
        """Reads and answers one request; a client that has gone or sent something that is not a request is
        dropped, and one whose request cannot be served now (out of descriptors, processes, memory) is told
        why: only its own tasks go with it, never the server or another client's."""
        try:
            data, fds, flags, _ = socket.recv_fds(connection.sock, fork_protocol.MAX_MESSAGE, fork_protocol.MAX_FDS)
        except BlockingIOError:
            return
        except OSError as err:
            # Out of descriptors for the ones it sent: the request stays unread, so the client is told and dropped.
            if err.errno in (errno.EMFILE, errno.ENFILE):
                connection.send({"refused": f"the fork server is out of file descriptors: {err.strerror}"})
            connection.gone = True
            return
        try:
            truncated = flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC)
            request = fork_protocol.decode_request(data, len(fds)) if data and not truncated else None
            if request is None:
                connection.gone = True
                return
            try:
                self._answer(connection, request, fds)
            except (OSError, MemoryError) as err:
                why = err.strerror if isinstance(err, OSError) and err.strerror else type(err).__name__
                connection.send({"id": request["id"], "refused": f"the fork server cannot fork now: {why}"})
        finally:
            for fd in fds:
                os.close(fd)

    def _answer(self, connection: _Connection, request: dict, fds: list[int]) -> None:
        refusal = runtime_started(self._allowed_threads)
        if refusal:
            connection.send({"id": request["id"], "refused": f"TensorFlow's runtime has started: {refusal}"})
            return
        task_entries = python_path.entries(request["env"].get("PYTHONPATH", ""), request["cwd"])
        refusal = python_path.refusal(self._path_entries, task_entries, sys.modules)
        if refusal:
            connection.send({"id": request["id"], "refused": refusal})
            return
        sys_path = python_path.task_sys_path(
            sys.path, self._path_entries, task_entries, safe_path=python_path.SAFE_PATH
        )
        # Taken before the fork: a child whose pidfd cannot be had is never made.
        ready_read, ready_write = os.pipe2(os.O_CLOEXEC)
        try:
            pid = self._fork(request, fds, sys_path, (ready_read, ready_write))
        except BaseException:
            os.close(ready_read)
            raise
        finally:
            os.close(ready_write)
        try:
            pidfd = _started(pid, ready_read)
        except BaseException:
            _kill_group(pid)
            os.waitpid(pid, 0)
            raise
        finally:
            os.close(ready_read)
        self._children[pid] = (pidfd, connection)
        connection.children.add(pid)
        self._selector.register(pidfd, selectors.EVENT_READ, pid)
        connection.send({"id": request["id"], "pid": pid})

    def _fork(self, request: dict, fds: list[int], sys_path: list[str], ready_pipe: tuple[int, int]) -> int:
        sys.stdout.flush()
        sys.stderr.flush()
        server_pid = os.getpid()
        # Held until the child has the task's own dispositions: a signal meant for
        # the server must not run the server's handler in the child.
        signal.pthread_sigmask(signal.SIG_BLOCK, _TASK_SIGNALS)
        try:
            # Python warns about fork() in a process with threads; the guard above
            # has checked that the ones here are the expected, fork-safe ones.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
            if pid == 0:
                own = [c.sock.fileno() for c in self._connections] + [fd for fd, _ in self._children.values()]
                if self._listener is not None:
                    own.append(self._listener.fileno())
                own += [self._selector.fileno(), ready_pipe[0]]
                _restore_signals()
                signal.pthread_sigmask(signal.SIG_UNBLOCK, _TASK_SIGNALS)
                fork_child.run(  # never returns
                    request, fds, server_pid=server_pid, close_fds=own, sys_path=sys_path, ready_fd=ready_pipe[1]
                )
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _TASK_SIGNALS)
        return pid

    def _on_exit(self, pid: int) -> None:
        _, status = os.waitpid(pid, 0)
        pidfd, connection = self._children.pop(pid)
        self._selector.unregister(pidfd)
        os.close(pidfd)
        if connection is not None:
            connection.children.discard(pid)
            connection.send({"exit": pid, "status": status})

    def stop_children(self) -> None:
        """SIGKILLs every child still running (its client has gone) and reaps it."""
        for pid, (pidfd, _) in self._children.items():
            _kill_group(pid)
            os.waitpid(pid, 0)  # SIGKILL cannot be refused
            os.close(pidfd)
        self._children.clear()


def _started(pid: int, ready_read: int) -> int:
    """Waits (bounded) until the child leads its own session, then returns a pidfd on it.

    Only then is its pid given to anyone: a kill of its process group from then on
    reaches it and everything it starts.
    """
    ready, _, _ = select.select([ready_read], [], [], _CHILD_START_SECS)
    if not ready or os.read(ready_read, 1) != b"1":
        raise OSError(errno.ECHILD, "the forked child did not start")
    return os.pidfd_open(pid)


def _kill_group(pid: int) -> None:
    """SIGKILLs an unreaped child and its process group: the child first, so that it can start nothing more."""
    for kill in (os.kill, os.killpg):
        with contextlib.suppress(ProcessLookupError):
            kill(pid, signal.SIGKILL)


# The dispositions a task starts with, as a fresh Python's: the listening server's
# own handlers (SIGTERM and SIGINT end it) and whatever its starter left ignored
# (a shell's ``&`` ignores SIGINT and SIGQUIT) are not the task's.
_TASK_SIGNALS = {
    signal.SIGTERM: signal.SIG_DFL,
    signal.SIGINT: signal.default_int_handler,
    signal.SIGQUIT: signal.SIG_DFL,
    signal.SIGHUP: signal.SIG_DFL,
    signal.SIGUSR1: signal.SIG_DFL,
    signal.SIGUSR2: signal.SIG_DFL,
}
# What ends the listening server.
_SERVER_END_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _restore_signals() -> None:
    for signum, handler in _TASK_SIGNALS.items():
        signal.signal(signum, handler)


def _end_on_signal(signum, _frame) -> None:
    raise SystemExit(128 + signum)


def _serve_socket_pair(fd: int, modules: list[str]) -> int:
    sock = socket.socket(fileno=fd)
    server = _Server()
    try:
        refusal = server.prepare(modules)
        if refusal:
            sock.settimeout(_SEND_TIMEOUT_SECS)
            with contextlib.suppress(OSError):
                sock.send(fork_protocol.encode({"refused": refusal}))
            return 0
        server.serve_one(sock)
    finally:
        server.stop_children()
        sock.close()
    return 0


def _serve_at(path: str, modules: list[str]) -> int:
    """The host's server: a line on stdout once it listens (or why it cannot), one once it can fork, then
    serves until a signal."""
    # What the starter left open (a shell's descriptors) is not the tasks': 0-2 only.
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    server = _Server()
    for signum in _SERVER_END_SIGNALS:
        signal.signal(signum, _end_on_signal)
    try:
        listener = host_socket.listen(path)
    except (OSError, ValueError) as err:
        _say(f"fork_server: cannot listen at {path}: {err}")
        return 2
    # Clients may connect from now on: they are told the server is importing, and served once it is done.
    _say(f"fork_server: listening at {path} (pid {os.getpid()}); importing TensorFlow")
    accepted: list[socket.socket] = []
    try:
        # TensorFlow's import chatter is kept off; a failed import is said in one line below.
        with _quiet_stderr(), host_socket.greeting(listener, accepted):
            refusal = server.prepare(modules)
        if refusal:
            _say(f"fork_server: {refusal}")
            return 1
        _say("fork_server: ready")
        server.serve_listening(listener, accepted)
    finally:
        for sock in accepted:
            sock.close()
        listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        server.stop_children()
        _say("fork_server: stopped; its tasks were ended and its socket removed")
    return 0


@contextlib.contextmanager
def _quiet_stderr():
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _say(line: str) -> None:
    """One status line on stdout; a reader that has gone (``| head -1``) does not end the server."""
    with contextlib.suppress(OSError):
        print(line, flush=True)


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[1] == "--listen":
        try:
            return _serve_at(host_socket.default_path(), [])
        except ConfigError as err:
            _say(f"fork_server: {err}")
            return 2
    if len(argv) >= 3 and argv[1] == "--listen" and argv[2] and not argv[2].startswith("\0"):
        return _serve_at(argv[2], argv[3:])
    if len(argv) >= 2 and argv[1].isdigit():
        return _serve_socket_pair(int(argv[1]), argv[2:])
    help_asked = len(argv) == 2 and argv[1] in ("-h", "--help")
    (sys.stdout if help_asked else sys.stderr).write(_USAGE)
    return 0 if help_asked else 2


_USAGE = """\
usage: python -m ps_toolkit.process.fork_server --listen [PATH [MODULE ...]]
  Imports TensorFlow once, then forks the tasks of every launch whose environment has
  PS_TOOLKIT_FORK_SERVER=PATH (absolute, so that launches from any folder find it; only this
  user can connect, and PATH must be in a folder only this user can write). Without PATH it
  listens at $TMPDIR/ps_toolkit-<uid>/fork_server.sock, the per-user state folder. MODULEs are
  imported too, before the first fork. SIGTERM or SIGINT end it and its tasks.
  (python -m ps_toolkit.process.fork_server FD [MODULE ...] is a launch's own server, started by fork_client.)
"""


if __name__ == "__main__":
    try:
        code = main(sys.argv)
    except SystemExit as ended:  # SIGTERM or SIGINT (_end_on_signal): its status, without the slow teardown
        code = ended.code if isinstance(ended.code, int) else 1
    # Tearing down an imported TensorFlow takes seconds, and the client waits for this
    # process to end: nothing is left to flush but the standard streams.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
