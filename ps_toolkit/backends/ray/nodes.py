"""What runs on the Ray nodes: a port holder per task and the actor that runs one task's command.

Both are plain classes made into actors by the caller (``ray.remote(...)``), so
this module imports Ray only where it runs on a node. The holder reserves its
task's port on its own node (``ports.reserve_ports``, the local launcher's
reservation) and keeps the claim for the whole run, restarts included; the task
actor runs the same command a local task runs, in a session of its own that
dies with the actor (``lifecycle.spawn``), and streams its output back.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence

from ps_toolkit.launch.ports import reserve_ports
from ps_toolkit.process import lifecycle

_CHUNK_BYTES = 1 << 16


class PortHolder:
    """Claims one free port on the node it runs on, until the actor ends."""

    def __init__(self):
        self._reservation = reserve_ports(1)

    def address(self) -> tuple[str, str, int]:
        """(node id, node IP, port): where this task listens."""
        import ray  # only on a node

        port = self._reservation.ports[0]
        return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address(), port

    def release(self) -> None:
        self._reservation.release()


class TaskActor:
    """Runs one task's command on its node; ``run`` streams its output and ends with its exit status."""

    def __init__(self):
        self._process: subprocess.Popen | None = None

    def run(self, argv: Sequence[str], env: Mapping[str, str], launcher_python: str, cwd: str) -> Iterator:
        """Yields the task's output in byte chunks, then its exit status (an int; -N for signal N).

        ``argv[0]`` naming the launcher's interpreter becomes this node's, which has ps_toolkit
        installed where the launcher's path may not exist.
        """
        argv = list(argv)
        if argv and argv[0] == launcher_python:
            argv[0] = sys.executable
        full_env = dict(os.environ)
        full_env.pop("TF_CONFIG", None)
        full_env.update(env)
        self._process = lifecycle.spawn(
            argv,
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=cwd if os.path.isdir(cwd) else None,
        )
        with self._process.stdout as output:
            while chunk := os.read(output.fileno(), _CHUNK_BYTES):
                yield chunk
        yield self._process.wait()

    def pid(self) -> int | None:
        """The task process's pid on its node (None before it starts): what a drill kills."""
        return None if self._process is None else self._process.pid

    def signal(self, signum: int) -> None:
        """Sends ``signum`` to the task's session (a stop asked for by the launcher)."""
        if self._process is not None:
            lifecycle.kill_tree(self._process, signal.Signals(signum))
