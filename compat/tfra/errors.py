"""The exception types TFRA raised, as one-line ConfigErrors, and the checks every served call shares."""

from __future__ import annotations

import tensorflow as tf

from ps_toolkit.base.errors import ConfigError
from ps_toolkit_compat.tfra import refused


class TfraTypeError(ConfigError, TypeError):
    """Where TFRA raised TypeError (dtypes, argument types): still a TypeError, and one line under run_legacy."""


class TfraValueError(ConfigError, ValueError):
    """Where TFRA raised ValueError (a name used twice, a bad combiner): still a ValueError, and one line."""


def require_graph_mode(what: str) -> None:
    """TFRA's eager path (ShadowVariable, tf.function) is not served: a one-line refusal when eager."""
    if tf.executing_eagerly():
        raise refused.NotServedUseError(
            f"{what} in eager mode is not served: {refused.EAGER}; under scripts/run_legacy.py graph mode is on, "
            "else call tf.compat.v1.disable_eager_execution() first"
        )


def translated(build):
    """``build()``, with the tables' ConfigErrors raised as the ValueError TFRA raised for the same input."""
    try:
        return build()
    except (TfraTypeError, TfraValueError, refused.NotServedUseError):
        raise
    except ConfigError as err:
        raise TfraValueError(str(err)) from None


def not_served_member(owner: str, name: str) -> refused.NotServedError:
    return refused.NotServedError(f"dynamic_embedding.{owner}.{name}")
