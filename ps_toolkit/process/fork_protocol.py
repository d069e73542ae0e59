"""The fork server's messages: JSON objects, one per SOCK_SEQPACKET datagram, file descriptors alongside.

Client to server: ``{"id": N, "argv": [...], "env": {...}, "cwd": "..."}`` with the
child's stdout, stderr and namespace descriptors attached (``FD_ORDER``).
Server to client: ``{"ready": PID}`` or ``{"refused": WHY}`` once, after its imports;
``{"id": N, "pid": PID}`` or ``{"id": N, "refused": WHY}`` for each request;
``{"exit": PID, "status": WAIT_STATUS}`` when a child ends.
"""

from __future__ import annotations

import json

# A request carries a whole environment; 1 MiB is far above any real one.
MAX_MESSAGE = 1 << 20
# The descriptors a request carries, in this order.
FD_ORDER = ("stdout", "stderr", "user_ns", "net_ns")
MAX_FDS = len(FD_ORDER)


def encode(message: dict) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode()


def decode(data: bytes) -> dict:
    return json.loads(data.decode())
