"""The fork-server starter: forks the registered task entries from a server shared by this process.

The toolkit's own task entries (``task_entries``, registered as data by the
package that owns them) are forked from a fork server this process shares
between its launches (one per import-time environment); every other command,
and every task when the server refused or could not start, is started with
exec (``lifecycle.spawn``), with one line saying why.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence

from ps_toolkit.base import tf_import
from ps_toolkit.process import fork_protocol, lifecycle, task_entries
from ps_toolkit.process.fork_client import HOST_SERVER_ENV, ForkServer, ForkUnavailable


def forkable(argv: Sequence[str], env: Mapping[str, str]) -> bool:
    """Whether ``argv`` is ``python SCRIPT ...`` or ``python -m MODULE ...`` with this interpreter and a
    registered forkable task entry whose needs the server's imports meet (task_entries.forkable)."""
    return task_entries.forkable(argv, env, tf_import.LEGACY_KERAS_ENV)


class ForkStarter:
    """A ``starter.TaskStarter`` that forks the registered task entries from a fork server, and execs the rest.

    ``note`` receives the one line a fallback to exec prints (default: stderr).

    Example:
        starter = ForkStarter(note=console.line)
        proc = starter.start(plan.argv, env=plan.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    """

    method = "fork"

    def __init__(self, note: Callable[[str], None] | None = None, preload: Sequence[str] = ()):
        self._note = note or (lambda line: print(line, file=sys.stderr))
        self._preload = tuple(preload)

    def start(self, argv: Sequence[str], *, env: Mapping[str, str], stdout, stderr, cwd: str | None = None, text=False):
        """See ``starter.TaskStarter.start``: a ``ForkedProcess`` when the server forked it, else an exec'd one."""
        if forkable(argv, env):
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


def close_shared() -> None:
    """Ends every shared fork server of this process (at exit; tests may call it)."""
    with _SHARED_LOCK:
        servers = list(_SHARED.values())
        _SHARED.clear()
    for server in servers:
        server.close()


atexit.register(close_shared)
