"""The client of a fork server (``process.fork_server``): starts or connects to one, and forks tasks from it.

    server = ForkServer(env)                     # starts the server; its imports run meanwhile
    proc = server.spawn([sys.executable, "scripts/run_task.py", ...], env=env, stdout=subprocess.PIPE)
    proc.pid, proc.poll(), proc.wait(timeout=5), proc.stdout    # as with Popen; proc.pid is the task itself
    server.close()                               # SIGKILLs what is still running, ends the server

A ``ForkedProcess`` is the task's own process (a child of the server, in its
own session), so everything that signals a Popen's pid or process group, opens
a pidfd on it or walks its tree with psutil works unchanged. Its exit status
comes from the server, which reaps it.

The starter launchers use is ``fork_starter.ForkStarter`` (behind the
``starter.TaskStarter`` interface); ``ForkedProcess`` is in ``forked_process``.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from ps_toolkit.base import paths
from ps_toolkit.base.paths import PACKAGE_PARENT
from ps_toolkit.process import fork_protocol, lifecycle, server_trust
from ps_toolkit.process.forked_process import STATUS_TIMEOUT_SECS, ForkedProcess, open_reader

# Names the host's fork server (``fork_server --listen PATH``): launches connect to it
# instead of starting a server of their own.
HOST_SERVER_ENV = "PS_TOOLKIT_FORK_SERVER"
# Importing TensorFlow on a busy 2-core machine can take tens of seconds.
READY_TIMEOUT_SECS = 120.0
# A host's server answers a connection at once, even while it imports; one silent this long is bypassed.
HOST_ANSWER_SECS = 3.0
_CLOSE_TIMEOUT_SECS = 10.0
_PUMP_SECS = 0.5


class ForkUnavailable(RuntimeError):
    """The fork server refused (TensorFlow's runtime had started in it) or could not start or answer."""


class ForkServer:
    """One fork server process, owned by the caller: ``close()`` (or the caller's death) ends it and its tasks."""

    def __init__(self, env: Mapping[str, str], preload: Sequence[str] = (), *, address: str | None = None):
        """Starts a server of this process's own, or connects to the host's server listening at ``address``."""
        self.env = {k: v for k, v in env.items() if k not in fork_protocol.PER_TASK}
        self.address = address
        self._process: subprocess.Popen | None = None
        self._stderr = None
        self._server_pid: int | None = None
        self._lock = threading.Lock()
        self._replies: dict[int, dict] = {}
        self._statuses: dict[int, int] = {}
        self._next_id = 0
        self._ready: bool | None = None
        self._answered = False  # a host's server has said something (it says "importing" at once)
        self.refusal: str | None = None
        # Called once if a server that was ready goes (a host's server ended by its owner).
        self.on_lost: Callable[[], None] | None = None
        if address is not None:
            self._sock = None
            refusal = server_trust.path_refusal(address) or self._connect(address)
            if refusal:
                self._ready, self.refusal = False, refusal
            return
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # The server's own output is TensorFlow's import chatter, which each task's log
        # has under exec; kept aside, its last line explains a server that died.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        try:
            self._process = lifecycle.spawn(
                [sys.executable, "-m", "ps_toolkit.process.fork_server", str(theirs.fileno()), *preload],
                env=self.env,
                stdout=subprocess.DEVNULL,
                stderr=self._stderr,
                cwd=PACKAGE_PARENT,  # puts this checkout's ps_toolkit first on the server's sys.path
                pass_fds=(theirs.fileno(),),
            )
        finally:
            theirs.close()

    def _connect(self, address: str) -> str | None:
        """Connects to the host's server at ``address`` if it is this user's own; why not, or None."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sock.settimeout(HOST_ANSWER_SECS)  # a full backlog blocks connect()
        try:
            with paths.socket_address(address) as short_address:
                sock.connect(short_address)
            refusal = server_trust.peer_refusal(sock, address)
        except OSError as err:
            refusal = f"nothing listens at {address} ({err.strerror or f'no answer within {HOST_ANSWER_SECS:g} s'})"
        if refusal:
            sock.close()
            return refusal
        sock.settimeout(None)
        self._sock = sock
        self._server_pid = server_trust.peer_uid_pid(sock)[1]
        return None

    @property
    def pid(self) -> int:
        """The server's process id (a host's server: known once it is ready)."""
        return self._process.pid if self._process is not None else self._server_pid

    @property
    def alive(self) -> bool:
        running = self._process is None or self._process.poll() is None
        return self._sock is not None and running and self.refusal is None

    def importing(self) -> bool:
        """Whether the server is still importing: its ready message (read now, if it has come) has not come."""
        if self._ready is None and self._sock is not None:
            with contextlib.suppress(ForkUnavailable):
                self._pump(time.monotonic())
        return self._ready is None

    def wait_ready(self, timeout_secs: float = READY_TIMEOUT_SECS) -> None:
        """Waits until the server has imported everything; ForkUnavailable when it refused or died."""
        deadline = time.monotonic() + timeout_secs
        # A host's server answers at once, importing or not: one that says nothing is stalled.
        answer_by = time.monotonic() + HOST_ANSWER_SECS
        while self._ready is None:
            now = time.monotonic()
            if now >= deadline:
                self._fail(f"the fork server was not ready after {timeout_secs:g} s")
            if self.address is not None and not self._answered and now >= answer_by:
                self._fail(
                    f"{self.address} (pid {self._server_pid}) did not answer within {HOST_ANSWER_SECS:g} s "
                    "(stopped or hung)"
                )
            self._pump(deadline if self._answered or self.address is None else min(deadline, answer_by))
        if not self._ready:
            raise ForkUnavailable(self.refusal)

    def spawn(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        stdout=None,
        stderr=None,
        cwd: str | None = None,
        text: bool = False,
    ) -> ForkedProcess:
        """Forks a task running ``argv`` (``python SCRIPT ...`` or ``python -m MODULE ...``); see the module doc."""
        self.wait_ready()
        sent, to_close, readers = [], [], {}
        try:
            for name, target in (("stdout", stdout), ("stderr", stderr)):
                if target is subprocess.PIPE:
                    readers[name], fd = os.pipe()
                    to_close.append(fd)
                elif target is subprocess.STDOUT:
                    fd = sent[0]
                elif target is None:  # inherited, as exec would
                    fd = 1 if name == "stdout" else 2
                elif target is subprocess.DEVNULL:
                    fd = os.open(os.devnull, os.O_WRONLY)
                    to_close.append(fd)
                else:
                    fd = target if isinstance(target, int) else target.fileno()
                sent.append(fd)
            for kind in ("user", "net"):  # the child joins this thread's namespaces (see fork_child)
                sent.append(os.open(f"/proc/thread-self/ns/{kind}", os.O_RDONLY))
                to_close.append(sent[-1])
            request = {"argv": list(argv), "env": dict(env), "cwd": cwd or os.getcwd()}
            reply = self._request(request, sent)
        except BaseException:
            for fd in readers.values():
                os.close(fd)
            raise
        finally:
            for fd in to_close:
                os.close(fd)
        streams = {name: open_reader(fd, text) for name, fd in readers.items()}
        return ForkedProcess(self, reply["pid"], list(argv), streams.get("stdout"), streams.get("stderr"))

    def close(self) -> None:
        """Ends the server: its tasks still running are SIGKILLed; bounded, then the server itself is killed.

        A server never asked for a task has none: it is killed at once, not left to finish its imports
        (a launch started it early and then failed its own checks).
        """
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._process is None:
            return  # a host's server: closing the connection ends this client's tasks there
        if self._next_id == 0:
            self._process.kill()
        try:
            self._process.wait(timeout=_CLOSE_TIMEOUT_SECS)
        except subprocess.TimeoutExpired:
            lifecycle.stop_trees([self._process], 0.0)
        self._stderr.close()

    # The socket.
    def _request(self, request: dict, fds: list[int]) -> dict:
        with self._lock:
            self._next_id += 1
            request_id = self._next_id
        try:
            socket.send_fds(self._sock, [fork_protocol.encode({"id": request_id, **request})], fds)
        except (OSError, AttributeError) as err:
            self._fail(f"the fork server cannot be reached: {err}")
        deadline = time.monotonic() + STATUS_TIMEOUT_SECS
        while request_id not in self._replies:
            if time.monotonic() >= deadline:
                self._fail("the fork server did not answer a fork request")
            self._pump(deadline)
        reply = self._replies.pop(request_id)
        if "refused" in reply:
            raise ForkUnavailable(reply["refused"])
        return reply

    def _pump(self, deadline: float) -> None:
        """Reads the server's messages that arrive until ``deadline`` (at least one, if any comes)."""
        with self._lock:
            if self._sock is None:
                self._fail("the fork server is closed")
            # Bounded per call, so that other threads' polls get the lock between messages.
            wait = min(_PUMP_SECS, max(0.0, deadline - time.monotonic()))
            ready, _, _ = select.select([self._sock], [], [], wait)
            while ready:
                try:
                    data = self._sock.recv(fork_protocol.MAX_MESSAGE, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    break
                except OSError:
                    data = b""
                if not data:
                    self._lost()
                    return
                try:
                    self._store(fork_protocol.decode(data))
                except (ValueError, KeyError, TypeError):
                    why = f"{self.address or 'the fork server'} does not speak the fork server's protocol"
                    if self._ready is None:
                        self._ready, self.refusal = False, why
                    self._lost()
                    raise ForkUnavailable(why) from None

    def _store(self, message: dict) -> None:
        if "exit" in message:
            self._statuses[message["exit"]] = os.waitstatus_to_exitcode(message["status"])
        elif "id" in message:
            self._replies[message["id"]] = message
        elif "importing" in message:
            self._answered = True
        elif "ready" in message:
            self._answered = True
            self._server_pid = message["ready"]
            self._ready = True
            if self.address is not None:
                self.refusal = self._mismatch(message)
                self._ready = self.refusal is None
        elif "refused" in message:
            self._ready, self.refusal = False, message["refused"]

    def _mismatch(self, ready: dict) -> str | None:
        """Why a host's server cannot run these tasks as exec would: another Python, another copy of the
        toolkit, or import-time variables whose values differ from the tasks'. None when it can."""
        if ready.get("executable") != os.path.realpath(sys.executable):
            return f"{self.address} runs another Python ({ready.get('executable')})"
        if ready.get("package_parent") != PACKAGE_PARENT:
            return f"{self.address} runs the ps_toolkit of {ready.get('package_parent')}"
        # A task joins its launcher's user and network namespaces, not its mounts (`ip netns exec`'s /etc/hosts).
        if ready.get("mount_namespace") != os.stat("/proc/self/ns/mnt").st_ino:
            return f"{self.address} runs in another mount namespace"
        ours = dict(fork_protocol.import_key(self.env))
        theirs = dict(ready.get("import_key", ()))
        differ = sorted(name for name in ours.keys() | theirs.keys() if ours.get(name) != theirs.get(name))
        if not differ:
            return None
        values = "; ".join(f"{name} {_shown(theirs.get(name))} there, {_shown(ours.get(name))} here" for name in differ)
        return (
            f"{self.address} imported TensorFlow under another {', '.join(differ)} ({values}; a server started "
            "under this launch's values would serve it)"
        )

    def _lost(self) -> None:
        """The server has gone (its tasks died with it): it answers nothing more."""
        if self._ready is None:
            self._ready, self.refusal = False, f"the fork server ended before it was ready ({self._last_words()})"
        elif self._ready and self.on_lost is not None:
            self.on_lost()
        self._sock.close()
        self._sock = None
        if self._process is not None:
            self._process.poll()

    def _last_words(self) -> str:
        if self._stderr is None:
            return f"{self.address} closed the connection"
        self._stderr.seek(0)
        lines = self._stderr.read().decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else "no output"

    def _fail(self, message: str) -> None:
        if self._ready is not False:
            self._ready, self.refusal = False, message
        raise ForkUnavailable(message)

    # For ForkedProcess.
    def status(self, pid: int, deadline: float) -> int | None:
        """The task's exit code once the server has reported it; waits for the report until ``deadline``."""
        while pid not in self._statuses:
            if self._sock is None:
                return None
            try:
                self._pump(deadline)
            except ForkUnavailable:
                return None
            if pid not in self._statuses and time.monotonic() >= deadline:
                return None
        return self._statuses.pop(pid)


def _shown(value: str | None) -> str:
    return "unset" if value is None else repr(value)


def start_host_server(path: str, env: Mapping[str, str], timeout_secs: float = 30.0) -> subprocess.Popen:
    """Starts the host's fork server at ``path`` as a child of this process (it dies with this thread);
    returns once it listens. ForkUnavailable (with its line) when it cannot.

    Launches whose environment has ``PS_TOOLKIT_FORK_SERVER=path`` fork their tasks from it;
    those that connect before its imports are done wait for them, as for a server of their
    own. ``stop_host_server`` ends it. From a shell: ``python -m ps_toolkit.process.fork_server --listen PATH``.
    """
    process = lifecycle.spawn(
        [sys.executable, "-m", "ps_toolkit.process.fork_server", "--listen", path],
        env={k: v for k, v in env.items() if k not in fork_protocol.PER_TASK},
        stdout=subprocess.PIPE,  # kept open until stop_host_server: its later lines must not fail
        stderr=subprocess.DEVNULL,
        cwd=PACKAGE_PARENT,
    )
    ready, _, _ = select.select([process.stdout], [], [], timeout_secs)
    line = process.stdout.readline().decode(errors="replace").strip() if ready else ""
    if not line.startswith("fork_server: listening at "):
        stop_host_server(process)
        raise ForkUnavailable(line or f"the host's fork server did not listen within {timeout_secs:g} s")
    return process


def stop_host_server(process: subprocess.Popen) -> int | None:
    """SIGTERM (its tasks are SIGKILLed, its socket removed), bounded; then SIGKILL."""
    process.terminate()
    try:
        code = process.wait(timeout=_CLOSE_TIMEOUT_SECS)
    except subprocess.TimeoutExpired:
        lifecycle.stop_trees([process], 0.0)
        code = process.poll()
    if process.stdout is not None:
        process.stdout.close()
    return code
