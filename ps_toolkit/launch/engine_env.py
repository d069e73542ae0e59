"""What a task started by an engine (Ray, Spark) on another node takes from the launcher's environment.

The node's own environment is the rest: paths such as PATH or a fork server's
socket are the launcher's machine's and would be wrong there.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ps_toolkit.network.port_guard import ALLOW_OPEN_PORTS_ENV

# Where the user's modules are (--model_fn=MODULE:...), and the open-ports consent the tasks check.
CARRIED_KEYS = ("PYTHONPATH", ALLOW_OPEN_PORTS_ENV)


def carried_env(extra: Mapping[str, str] | None) -> dict[str, str]:
    """The launcher's values of ``CARRIED_KEYS`` that are set, with ``extra`` (the launch's own) on top."""
    env = {key: os.environ[key] for key in CARRIED_KEYS if key in os.environ}
    env.update(extra or {})
    return env
