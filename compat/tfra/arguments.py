"""Checks of TFRA Variable arguments the tables themselves do not take, raised as TFRA's ValueError, in one line."""

from __future__ import annotations

import numbers

from ps_toolkit_compat.tfra import errors


def checked_init_size(init_size, name: str) -> int:
    """``init_size`` as an int: a whole number >= 0 (TFRA's tables' initial capacity, 0 for their default).

    Raises:
        TfraValueError: for a negative, fractional or non-numeric ``init_size``, naming the value and the Variable.
    """
    whole = isinstance(init_size, numbers.Integral) and not isinstance(init_size, bool)
    if not whole or init_size < 0:
        raise errors.TfraValueError(
            f"dynamic_embedding.Variable {name}: init_size={init_size!r} must be an integer >= 0 "
            "(the initial capacity of its hash tables; 0 for the default)"
        )
    return int(init_size)
