"""TF_CONFIG, read and parsed in one place: every reader of the variable (flags, the API, compat) goes through here."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from ps_toolkit.base.errors import ConfigError

TF_CONFIG_ENV = "TF_CONFIG"


def clip(value, limit: int = 120) -> str:
    """``value`` as text (JSON for non-strings), cut to ``limit`` characters for a one-line error."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def tf_config_text(environ: Mapping[str, str] | None = None) -> str | None:
    """TF_CONFIG's text in ``environ`` (default: this process's), or None when it is unset or blank."""
    text = (os.environ if environ is None else environ).get(TF_CONFIG_ENV)
    return text if text and text.strip() else None


def parse_tf_config(text: str, source: str = TF_CONFIG_ENV, error: type[Exception] = ConfigError) -> dict:
    """The JSON object in a TF_CONFIG text.

    Args:
        text: The variable's value.
        source: Where it came from, for the error.
        error: The exception class raised on bad input (compat raises the estimator's ValueError kind).

    Returns:
        The parsed object (``cluster``, ``task``, ``environment``; checked by ClusterConfig.from_dict).

    Raises:
        ``error``: the text is not JSON, or not a JSON object; one line naming ``source``.
    """
    try:
        payload = json.loads(text)
    except (TypeError, ValueError) as err:
        raise error(f"{source} is not valid JSON ({err.args[0]}): {clip(text)}") from None
    if not isinstance(payload, dict):
        raise error(f"{source} must be a JSON object, got {clip(text)}")
    return payload


def read_tf_config(environ: Mapping[str, str] | None = None, error: type[Exception] = ConfigError) -> dict | None:
    """The parsed TF_CONFIG of ``environ`` (default: this process's); None when it is unset or blank.

    Raises:
        ``error``: TF_CONFIG is set but not a JSON object (see parse_tf_config).
    """
    text = tf_config_text(environ)
    return None if text is None else parse_tf_config(text, TF_CONFIG_ENV, error)
