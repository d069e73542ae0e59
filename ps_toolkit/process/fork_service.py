"""The fork server's service: its clients, their fork requests, their children, and the guard on forking.

Forking is only safe while TensorFlow's runtime has not started: no thread
pool, eager context or session may exist in the parent, or the child would
inherit locks held by threads it does not have. The guard (``runtime_started``)
checks this after the imports and before every fork; when it fails, the
request is answered ``refused`` with the reason and the client execs its task.
A client that goes takes its tasks with it, however it goes.
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
from ps_toolkit.base.paths import PACKAGE_PARENT
from ps_toolkit.process import fork_child, fork_protocol, host_socket, python_path, task_entries

# Threads that TensorFlow 2.21's ``import tensorflow`` starts (after numpy's
# OpenBLAS pool, which is counted before it and is fork-safe: it re-creates
# itself in the child through pthread_atfork). More than this after the
# imports means TensorFlow's runtime has started.
TF_IMPORT_THREADS = 1
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


class Connection:
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


class ForkService:
    """Forks tasks for its clients: one (a socket pair, ``serve_one``) or any number (``serve_listening``)."""

    def __init__(self):
        self._selector = selectors.DefaultSelector()
        self._children: dict[int, tuple[int, Connection | None]] = {}  # pid -> (pidfd, its client)
        self._connections: list[Connection] = []
        self._listener: socket.socket | None = None
        self._allowed_threads = 0
        # What a client compares with its tasks' environment: this process's own, before the imports change it.
        self._imported_under = [list(item) for item in fork_protocol.import_key(os.environ)]
        self._path_entries = python_path.entries(os.environ.get("PYTHONPATH", ""), os.getcwd())

    def prepare(self, modules: list[str]) -> str | None:
        """Imports what the registered task entries need (task_entries.preload) and ``modules``; why forking is
        unsafe afterwards, or None."""
        # As scripts/run_task.py and run_legacy.py do before their import (fork_client.forkable
        # keeps a legacy script whose environment says otherwise on exec).
        tf_import.prefer_lean_import()
        import numpy  # noqa: F401 - its thread pool is counted before TensorFlow's

        self._allowed_threads = thread_count() + TF_IMPORT_THREADS
        for name in (*task_entries.preload(), *modules):
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
            elif isinstance(key.data, Connection):
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

    def _settle(self, connection: Connection) -> None:
        """Drops a client that has gone; asks to be told when a slow one can take more."""
        if connection.gone:
            self._drop(connection)
            return
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if connection.pending else 0)
        self._selector.modify(connection.sock, events, connection)

    def _add(self, sock: socket.socket) -> Connection:
        connection = Connection(sock)
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

    def _drop(self, connection: Connection) -> None:
        """The client has gone: its tasks go with it, as they would with a server of their own."""
        connection.gone = True
        self._selector.unregister(connection.sock)
        self._connections.remove(connection)
        connection.sock.close()
        for pid in connection.children:
            _kill_group(pid)
            pidfd, _ = self._children[pid]
            self._children[pid] = (pidfd, None)  # reaped when its exit is seen

    def _handle_request(self, connection: Connection) -> None:
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

    def _answer(self, connection: Connection, request: dict, fds: list[int]) -> None:
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
                restore_task_signals()
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


def restore_task_signals() -> None:
    """Gives this process (a forked child) the signal dispositions a fresh Python starts with."""
    for signum, handler in _TASK_SIGNALS.items():
        signal.signal(signum, handler)
