"""The fork server: one process that imports TensorFlow once, then forks each task from that state.

    python -m ps_toolkit.process.fork_server FD [MODULE ...]     # started by fork_client, never by hand

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
The server ends when its client closes the socket, SIGKILLing any child still
running; it dies with the process that started it (PR_SET_PDEATHSIG), and its
children die with it.
"""

from __future__ import annotations

import importlib
import os
import selectors
import signal
import socket
import sys
import warnings

from ps_toolkit.base import tf_import, tf_internals
from ps_toolkit.process import fork_child, fork_protocol

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
    "ps_toolkit.task.monitored_training",
    "ps_toolkit.models.classifiers",
    "ps_toolkit.training.model_check",
    "ps_toolkit.training.export",
    "ps_toolkit_compat.legacy_tf",
)
# How long a child's exit status waits in the socket buffer for the client.
_SEND_TIMEOUT_SECS = 10.0


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


class _Server:
    def __init__(self, sock: socket.socket):
        self._sock = sock
        self._selector = selectors.DefaultSelector()
        self._selector.register(sock, selectors.EVENT_READ, None)
        self._children: dict[int, int] = {}  # pid -> pidfd
        self._allowed_threads = 0

    def serve(self, modules: list[str]) -> None:
        # As scripts/run_task.py and run_legacy.py do before their import (fork_client.forkable
        # keeps a legacy script whose environment says otherwise on exec).
        tf_import.prefer_lean_import()
        import numpy  # noqa: F401 - its thread pool is counted before TensorFlow's

        self._allowed_threads = thread_count() + TF_IMPORT_THREADS
        try:
            for name in (*PRELOAD, *modules):
                importlib.import_module(name)
        except Exception as err:  # any import failure: the client falls back to exec, which reports it
            self._send({"refused": f"the fork server cannot import {name}: {err}"})
            return
        refusal = runtime_started(self._allowed_threads)
        if refusal:
            self._send({"refused": f"TensorFlow's runtime has already started in the fork server: {refusal}"})
            return
        self._send({"ready": os.getpid()})
        while True:
            for key, _ in self._selector.select():
                if key.data is None:
                    if not self._on_request():
                        return
                else:
                    self._on_exit(key.data)

    def _on_request(self) -> bool:
        """Handles one request; False once the client has gone."""
        try:
            data, fds, _, _ = socket.recv_fds(self._sock, fork_protocol.MAX_MESSAGE, fork_protocol.MAX_FDS)
        except ConnectionResetError:
            return False
        if not data:
            for fd in fds:
                os.close(fd)
            return False
        request = fork_protocol.decode(data)
        try:
            refusal = runtime_started(self._allowed_threads)
            if refusal:
                self._send({"id": request["id"], "refused": f"TensorFlow's runtime has started: {refusal}"})
                return True
            pid = self._fork(request, fds)
        except OSError as err:
            self._send({"id": request["id"], "refused": f"fork() failed: {err.strerror}"})
            return True
        finally:
            for fd in fds:
                os.close(fd)
        pidfd = os.pidfd_open(pid)
        self._children[pid] = pidfd
        self._selector.register(pidfd, selectors.EVENT_READ, pid)
        self._send({"id": request["id"], "pid": pid})
        return True

    def _fork(self, request: dict, fds: list[int]) -> int:
        sys.stdout.flush()
        sys.stderr.flush()
        server_pid = os.getpid()
        # Python warns about fork() in a process with threads; the guard above
        # has checked that the ones here are the expected, fork-safe ones.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:
            own = [self._sock.fileno(), *self._children.values()]
            fork_child.run(request, fds, server_pid=server_pid, close_fds=own)  # never returns
        return pid

    def _on_exit(self, pid: int) -> None:
        _, status = os.waitpid(pid, 0)
        pidfd = self._children.pop(pid)
        self._selector.unregister(pidfd)
        os.close(pidfd)
        self._send({"exit": pid, "status": status})

    def _send(self, message: dict) -> None:
        try:
            self._sock.send(fork_protocol.encode(message))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client has gone; serve() ends at the next select

    def stop_children(self) -> None:
        """SIGKILLs every child still running (its client has gone) and reaps it."""
        for pid, pidfd in self._children.items():
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)  # SIGKILL cannot be refused
            os.close(pidfd)
        self._children.clear()


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not argv[1].isdigit():
        sys.stderr.write("fork_server: usage: python -m ps_toolkit.process.fork_server FD [MODULE ...]\n")
        return 2
    sock = socket.socket(fileno=int(argv[1]))
    sock.settimeout(_SEND_TIMEOUT_SECS)
    server = _Server(sock)
    try:
        server.serve(argv[2:])
    finally:
        server.stop_children()
        sock.close()
    return 0


if __name__ == "__main__":
    code = main(sys.argv)
    # Tearing down an imported TensorFlow takes seconds, and the client waits for this
    # process to end: nothing is left to flush but the standard streams.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
