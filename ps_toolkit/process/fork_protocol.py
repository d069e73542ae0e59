"""The fork server's messages: JSON objects, one per SOCK_SEQPACKET datagram, file descriptors alongside.

Client to server: ``{"id": N, "argv": [...], "env": {...}, "cwd": "..."}`` with the
child's stdout, stderr and namespace descriptors attached (``FD_ORDER``).
Server to client: ``{"ready": PID, "import_key": [[NAME, VALUE], ...], "executable": PATH,
"package_parent": PATH, "mount_namespace": INODE}`` (the environment its imports ran under,
``import_key``; its Python; the folder its ps_toolkit comes from; its mount namespace) or
``{"refused": WHY}`` once, after its imports (a host's server says ``{"importing": PID}`` first, as soon
as it accepts a client during its imports);
``{"id": N, "pid": PID}`` or ``{"id": N, "refused": WHY}`` for each request;
``{"exit": PID, "status": WAIT_STATUS}`` when a child ends.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

# A request carries a whole environment; 1 MiB is far above any real one.
MAX_MESSAGE = 1 << 20
# Bounds on a request's parts: far above any real task, far below what would cost the server.
MAX_ARGS = 10_000
MAX_ENV = 10_000
# The descriptors a request carries, in this order.
FD_ORDER = ("stdout", "stderr", "user_ns", "net_ns")
MAX_FDS = len(FD_ORDER)


def encode(message: dict) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode()


def decode(data: bytes) -> dict:
    """A message; ValueError when ``data`` is not one (not JSON, not an object)."""
    message = json.loads(data.decode())
    if not isinstance(message, dict):
        raise ValueError("not a JSON object")
    return message


def decode_request(data: bytes, num_fds: int) -> dict | None:
    """A fork request, checked before anything is forked for it; None when ``data`` is not one.

    Every field is checked for what the fork would choke on later: strings with NUL bytes
    (exec and os.environ refuse them), keys with "=", a relative working folder; JSON nested
    too deep for the parser is not a request either (RecursionError), nor is anything too big.
    """
    if len(data) > MAX_MESSAGE:
        return None
    try:
        request = decode(data)
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError included
        return None
    argv, env, cwd = request.get("argv"), request.get("env"), request.get("cwd")
    well_formed = (
        type(request.get("id")) is int
        and isinstance(argv, list)
        and 2 <= len(argv) <= MAX_ARGS
        and all(_clean(arg) for arg in argv)
        and isinstance(env, dict)
        and len(env) <= MAX_ENV
        and all(_clean(k) and k and "=" not in k and _clean(v) for k, v in env.items())
        and _clean(cwd)
        and os.path.isabs(cwd)
        and num_fds == MAX_FDS
    )
    return request if well_formed else None


def _clean(value) -> bool:
    """A string that exec, os.environ and the file system accept: no NUL byte, no lone surrogate."""
    if not isinstance(value, str) or "\0" in value:
        return False
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


# Variables read when TensorFlow or Python start: tasks whose values differ need their own server.
_IMPORT_TIME_PREFIXES = ("PYTHON", "TF_", "CUDA_", "OMP_", "MKL_", "OPENBLAS_", "LD_")
# Read by each task at run time, not at import.
PER_TASK = ("TF_CONFIG",)
# Read at start-up, but a forked task makes its own standard streams (task.tolerant_streams: line-buffered,
# written through), so the server's value does not reach it.
_NOT_INHERITED = ("PYTHONUNBUFFERED",)
# Compared task by task instead: a task may add folders to the server's (python_path).
EXTENDABLE = ("PYTHONPATH",)


def import_key(env: Mapping[str, str]) -> tuple:
    """The part of an environment that a server's imports depend on and a task must share exactly."""
    ignored = PER_TASK + _NOT_INHERITED + EXTENDABLE
    return tuple(sorted((k, v) for k, v in env.items() if k.startswith(_IMPORT_TIME_PREFIXES) and k not in ignored))
