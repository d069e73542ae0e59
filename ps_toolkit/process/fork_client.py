"""Starting tasks from a fork server (``process.fork_server``): handles that behave like ``subprocess.Popen``.

    server = ForkServer(env)                     # starts the server; its imports run meanwhile
    proc = server.spawn([sys.executable, "scripts/run_task.py", ...], env=env, stdout=subprocess.PIPE)
    proc.pid, proc.poll(), proc.wait(timeout=5), proc.stdout    # as with Popen; proc.pid is the task itself
    server.close()                               # SIGKILLs what is still running, ends the server

A ``ForkedProcess`` is the task's own process (a child of the server, in its
own session), so everything that signals a Popen's pid or process group, opens
a pidfd on it or walks its tree with psutil works unchanged. Its exit status
comes from the server, which reaps it.

``TaskStarter`` is what launchers use: the toolkit's own task scripts
(``forkable``) are forked from a server shared by this process; every other
command, and every task when the server refused or could not start, is
started with exec (``lifecycle.spawn``), with one line saying why.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from ps_toolkit.base import paths, tf_import
from ps_toolkit.base.paths import PACKAGE_PARENT
from ps_toolkit.process import fork_protocol, lifecycle, server_trust

# Commands a fork server runs: the toolkit's task entry and the legacy-script runner.
RUN_TASK_SCRIPT = os.path.join(PACKAGE_PARENT, "scripts", "run_task.py")
RUN_LEGACY_SCRIPT = os.path.join(PACKAGE_PARENT, "scripts", "run_legacy.py")
FORKABLE_SCRIPTS = (RUN_TASK_SCRIPT, RUN_LEGACY_SCRIPT)
RUN_TASK_MODULE = "ps_toolkit.tools.run_task"
RUN_LEGACY_MODULE = "ps_toolkit_compat.run_legacy"
FORKABLE_MODULES = (RUN_TASK_MODULE, RUN_LEGACY_MODULE)
START_METHODS = ("fork", "exec")
# Names the host's fork server (``fork_server --listen PATH``): launches connect to it
# instead of starting a server of their own.
HOST_SERVER_ENV = "PS_TOOLKIT_FORK_SERVER"
# Importing TensorFlow on a busy 2-core machine can take tens of seconds.
READY_TIMEOUT_SECS = 120.0
# A host's server answers a connection at once, even while it imports; one silent this long is bypassed.
HOST_ANSWER_SECS = 3.0
# A child's exit status follows its exit at once; this only bounds a stuck server.
_STATUS_TIMEOUT_SECS = 10.0
_CLOSE_TIMEOUT_SECS = 10.0
_PUMP_SECS = 0.5


class ForkUnavailable(RuntimeError):
    """The fork server refused (TensorFlow's runtime had started in it) or could not start or answer."""


def forkable(argv: Sequence[str], env: Mapping[str, str]) -> bool:
    """Whether ``argv`` is ``python SCRIPT ...`` or ``python -m MODULE ...`` with this interpreter and
    one of the toolkit's task entries.

    The server imports TensorFlow with the legacy Keras unless ``env`` says otherwise
    (tf_import), as run_task.py does; run_legacy.py always wants it, so with the
    modern Keras chosen it is exec'd.
    """
    if len(argv) < 2 or os.path.realpath(_command_file(argv[0], env)) != os.path.realpath(sys.executable):
        return False
    if argv[1] == "-m":
        entry, legacy, known = (argv[2] if len(argv) > 2 else ""), RUN_LEGACY_MODULE, FORKABLE_MODULES
    else:
        entry, legacy, known = os.path.realpath(argv[1]), RUN_LEGACY_SCRIPT, FORKABLE_SCRIPTS
    if entry == legacy and env.get(tf_import.LEGACY_KERAS_ENV, "1") != "1":
        return False
    return entry in known


def _command_file(name: str, env: Mapping[str, str]) -> str:
    """The file a command runs: ``name`` itself when it is a path, else the first match on the task's PATH
    (``python scripts/run_legacy.py`` as the README writes it is this interpreter when PATH says so)."""
    if os.sep in name:
        return name
    return shutil.which(name, path=env.get("PATH", os.defpath)) or name


_HELP_ARGS = ("--help", "-help", "-h", "-?", "--helpfull", "-helpfull", "--helpshort", "--helpxml")


def launch_forks_tasks(argv: Sequence[str]) -> bool:
    """Whether ``scripts/launch_local.py`` with these arguments forks run_task.py tasks from a fork server,
    judged before its flags are parsed (so that it can start the server first): no command after --, no
    help asked, --start_method not exec, no --flagfile (whose flags cannot be seen here)."""
    if "--" in argv:
        return False
    method = "fork"
    for position, arg in enumerate(argv[1:], start=1):
        name, equals, value = arg.lstrip("-").partition("=")
        if arg in _HELP_ARGS or name == "flagfile":
            return False
        if arg.startswith("-") and name == "start_method":
            method = value if equals else (argv[position + 1] if position + 1 < len(argv) else "")
    return method == "fork"


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
        streams = {name: _open_reader(fd, text) for name, fd in readers.items()}
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
        deadline = time.monotonic() + _STATUS_TIMEOUT_SECS
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


def _open_reader(fd: int, text: bool):
    if text:
        return open(fd, encoding="utf-8", errors="replace")  # noqa: SIM115 - the caller closes it
    return open(fd, "rb")  # noqa: SIM115


class ForkedProcess:
    """A task forked by a fork server, with the parts of ``subprocess.Popen`` that launchers use."""

    def __init__(self, server: ForkServer, pid: int, args: list, stdout, stderr):
        self._server = server
        self.pid, self.args, self.stdout, self.stderr = pid, args, stdout, stderr
        self.stdin = None
        self.returncode: int | None = None
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except OSError:
            self._pidfd = None  # already reaped by the server: its status is on the way

    @property
    def server_gone(self) -> str | None:
        """When the fork server that forked this task has gone (taking its tasks with it): which one."""
        if self._server.alive:
            return None
        return self._server.address or f"the launch's own (pid {self._server.pid})"

    def poll(self) -> int | None:
        if self.returncode is None:
            self._settle(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            step = 1.0 if deadline is None else max(0.0, deadline - time.monotonic())
            self._settle(min(step, 1.0))
            if self.returncode is None and deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(15)

    def kill(self) -> None:
        self.send_signal(9)

    def _settle(self, wait_secs: float) -> None:
        """Sets ``returncode`` once the task has exited; waits at most ``wait_secs`` for the exit itself."""
        if not self._exited(wait_secs):
            code = self._server.status(self.pid, time.monotonic())
            if code is not None:
                self._record(code)
            return
        # It has exited: the server reaps it and reports its status right away.
        code = self._server.status(self.pid, time.monotonic() + _STATUS_TIMEOUT_SECS)
        # No report (the server itself died, taking its tasks with it): a SIGKILL is what ended it.
        self._record(-9 if code is None else code)

    def _exited(self, wait_secs: float) -> bool:
        if self._pidfd is None:
            return True
        ready, _, _ = select.select([self._pidfd], [], [], wait_secs)
        return bool(ready)

    def _record(self, code: int) -> None:
        self.returncode = code
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def __del__(self):
        if getattr(self, "_pidfd", None) is not None:
            os.close(self._pidfd)


class TaskStarter:
    """Starts tasks by fork where it can, else by exec; ``note`` receives the one line a fallback prints.

    Example:
        starter = TaskStarter("fork", note=console.line)
        proc = starter.start(plan.argv, env=plan.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    """

    def __init__(self, method: str = "fork", note: Callable[[str], None] | None = None, preload: Sequence[str] = ()):
        if method not in START_METHODS:
            raise ValueError(f"start method {method!r}; valid: {', '.join(START_METHODS)}")
        self.method = method
        self._note = note or (lambda line: print(line, file=sys.stderr))
        self._preload = tuple(preload)

    def start(self, argv: Sequence[str], *, env: Mapping[str, str], stdout, stderr, cwd: str | None = None, text=False):
        if self.method == "fork" and forkable(argv, env):
            server = shared_server(env, self._preload, self._note)
            if server is not None:
                if server.importing():  # the wait that follows is seconds of silence otherwise
                    _note_once(
                        self._note, "fork server: importing TensorFlow once for all the tasks; they start after it"
                    )
                try:
                    process = server.spawn(argv, env=env, stdout=stdout, stderr=stderr, cwd=cwd, text=text)
                except ForkUnavailable as err:
                    self._refused(err)
                else:
                    if server.address is not None:  # said once the first task runs: a refused launch starts none
                        _note_once(
                            self._note, f"fork server: the tasks are forked from the host's server at {server.address}"
                        )
                    return process
        return lifecycle.spawn(argv, env=env, stdout=stdout, stderr=stderr, cwd=cwd, text=text)

    def _refused(self, err: ForkUnavailable) -> None:
        _note_once(self._note, f"fork server: {err}; starting the toolkit's tasks with exec instead")


# This process's shared servers, one per import-time environment (see import_key) and PYTHONPATH,
# and the refusals already reported (one line each).
_SHARED: dict[tuple, ForkServer] = {}
_SHARED_LOCK = threading.Lock()
_NOTED: set[str] = set()


def shared_server(
    env: Mapping[str, str], preload: Sequence[str] = (), note: Callable[[str], None] | None = None
) -> ForkServer | None:
    """This process's fork server for ``env`` (made on first use); a refused one is kept, to fail fast.

    It is the host's server named by ``env[PS_TOOLKIT_FORK_SERVER]`` when that one is
    there and imported under the same environment; otherwise (said once, through
    ``note``) a server of this process's own.
    """
    # A server of this process's own is imported under its first task's PYTHONPATH: one per PYTHONPATH.
    key = (fork_protocol.import_key(env), env.get("PYTHONPATH", ""), tuple(preload))
    with _SHARED_LOCK:
        server = _SHARED.get(key)
        if server is not None and server.refusal is None and not server.alive:
            server.close()
            server = None
        if server is None:
            server = _SHARED[key] = _new_server(env, preload, note)
    return server


def _new_server(env: Mapping[str, str], preload: Sequence[str], note: Callable[[str], None] | None) -> ForkServer:
    # A path written with ~ in a configuration file reaches here unexpanded.
    address = os.path.expanduser(env.get(HOST_SERVER_ENV, ""))
    if address and not preload:
        host = ForkServer(env, address=address)
        try:
            host.wait_ready()  # a host's server still importing is waited for, as a launch's own would be
            host.on_lost = lambda: _note_once(note, f"fork server: {address} has gone, and the tasks it forked with it")
            return host
        except ForkUnavailable as err:
            host.close()
            _note_once(note, f"fork server: {HOST_SERVER_ENV}: {err}; this launch starts its own")
    return ForkServer(env, preload)


def _note_once(note: Callable[[str], None] | None, line: str) -> None:
    if line not in _NOTED:
        _NOTED.add(line)
        (note or (lambda text: print(text, file=sys.stderr)))(line)


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


def close_shared() -> None:
    """Ends every shared fork server of this process (at exit; tests may call it)."""
    with _SHARED_LOCK:
        servers = list(_SHARED.values())
        _SHARED.clear()
    for server in servers:
        server.close()


atexit.register(close_shared)
