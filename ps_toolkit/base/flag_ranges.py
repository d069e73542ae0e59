"""Range checks for numeric flags: every value outside its meaningful range is a ConfigError naming it.

absl accepts any integer and any float, NaN and infinity included; TensorFlow
then overflows int64 (a --train_steps=2**63 run never ends) or compares with
NaN (a --save_checkpoint_secs=nan chief never saves, --watchdog_secs=nan turns
the watchdog off). These checks run before anything starts.
"""

from __future__ import annotations

import math

from ps_toolkit.base.errors import ConfigError

INT64_MAX = 2**63 - 1


def check_int(name: str, value: int | None, *, low: int = 1, high: int = INT64_MAX, why: str = "") -> None:
    """``low <= value <= high`` for a flag given as an integer (None: not given)."""
    if value is None:
        return
    if not low <= value <= high:
        reason = f" ({why})" if why else ""
        raise ConfigError(f"--{name}={value} is outside {low}-{high}{reason}")


def check_seconds(name: str, value: float | None, *, zero_ok: bool = False, none_ok: bool = True) -> None:
    """A finite interval: positive, or non-negative when ``zero_ok`` (None allowed when ``none_ok``)."""
    if value is None:
        if none_ok:
            return
        raise ConfigError(f"--{name} is required")
    if not math.isfinite(value):
        raise ConfigError(f"--{name}={value} is not a finite number of seconds")
    if value < 0 or (value == 0 and not zero_ok):
        raise ConfigError(f"--{name}={value} must be {'zero or ' if zero_ok else ''}positive")
