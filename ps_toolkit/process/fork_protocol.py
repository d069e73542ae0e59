"""The fork server's messages: JSON objects, one per SOCK_SEQPACKET datagram, file descriptors alongside.

Client to server: ``{"id": N, "argv": [...], "env": {...}, "cwd": "..."}`` with the
child's stdout, stderr and namespace descriptors attached (``FD_ORDER``).
Server to client: ``{"ready": PID, "import_key": [[NAME, VALUE], ...], "executable": PATH,
"package_parent": PATH, "mount_namespace": INODE}`` (the environment its imports ran under,
``import_key``; its Python; the folder its ps_toolkit comes from; its mount namespace) or
``{"refused": WHY}`` once, after its imports;
``{"id": N, "pid": PID}`` or ``{"id": N, "refused": WHY}`` for each request;
``{"exit": PID, "status": WAIT_STATUS}`` when a child ends.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

# A request carries a whole environment; 1 MiB is far above any real one.
MAX_MESSAGE = 1 << 20
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
    """A fork request, checked before anything is forked for it; None when ``data`` is not one."""
    try:
        request = decode(data)
    except ValueError:  # UnicodeDecodeError and JSONDecodeError included
        return None
    argv, env = request.get("argv"), request.get("env")
    well_formed = (
        type(request.get("id")) is int
        and isinstance(argv, list)
        and len(argv) >= 2
        and all(isinstance(arg, str) for arg in argv)
        and isinstance(env, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
        and isinstance(request.get("cwd"), str)
        and num_fds == MAX_FDS
    )
    return request if well_formed else None


# Variables read when TensorFlow or Python start: tasks whose values differ need their own server.
_IMPORT_TIME_PREFIXES = ("PYTHON", "TF_", "CUDA_", "OMP_", "MKL_", "OPENBLAS_", "LD_")
# Read by each task at run time, not at import.
PER_TASK = ("TF_CONFIG",)
# Read at start-up, but a forked task makes its own standard streams (task_streams: line-buffered,
# written through), so the server's value does not reach it.
_NOT_INHERITED = ("PYTHONUNBUFFERED",)
# Compared task by task instead: a task may add folders to the server's (python_path).
EXTENDABLE = ("PYTHONPATH",)


def import_key(env: Mapping[str, str]) -> tuple:
    """The part of an environment that a server's imports depend on and a task must share exactly."""
    ignored = PER_TASK + _NOT_INHERITED + EXTENDABLE
    return tuple(sorted((k, v) for k, v in env.items() if k.startswith(_IMPORT_TIME_PREFIXES) and k not in ignored))
