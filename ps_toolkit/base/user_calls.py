"""A user's function named by a flag (``--backend=m:f``, ``--placement=m:f``, ...), called so its failure is one line.

What the user's code raises, or a result of the wrong kind, is the user's input gone wrong: a ConfigError
naming the flag, the exception and the line of the user's file it came from, never a traceback of the toolkit.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

from ps_toolkit.base.errors import ConfigError


def where(err: BaseException) -> str:
    """``file:line`` of the innermost frame ``err`` passed through ("" without a traceback)."""
    frames = traceback.extract_tb(err.__traceback__)
    return f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""


def failure(given: str, action: str, err: BaseException) -> ConfigError:
    """The one-line error for ``err``, raised by the user's code while ``action`` ("raised", "importing m")."""
    text = str(err).splitlines()[0] if str(err) else ""
    return ConfigError(f"{given}: {action} {type(err).__name__}{': ' + text if text else ''}{where(err)}")


def call(function: Callable, given: str, *args: Any) -> Any:
    """``function(*args)``; what it raises becomes a ConfigError naming ``given`` (e.g. "--backend=m:f").

    Raises:
        ConfigError: the function raised (a ConfigError of its own passes through as it is).
    """
    try:
        return function(*args)
    except ConfigError:
        raise
    except KeyboardInterrupt:
        interrupted(given)
    except Exception as err:  # noqa: BLE001 - the user's code: any failure is reported as theirs, in one line
        raise failure(given, "raised", err) from None


def interrupted(given: str) -> None:
    """Ctrl-C while the user's code ran: one line, exit 130 (128 + SIGINT), as for a task."""
    print(f"{os.path.basename(sys.argv[0])}: interrupted (Ctrl-C) while {given} ran", file=sys.stderr)
    raise SystemExit(130)
