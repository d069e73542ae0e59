"""The estimator's bad input as one-line errors that are still the ValueErrors the estimator raised.

TensorFlow's estimator raises a ValueError (or a JSON error, itself a
ValueError) with a traceback for a TF_CONFIG it cannot use and an input_fn
result of the wrong shape. Under the compat layer they are
``EstimatorValueError``s: a ValueError, so ``except ValueError`` in user code
still catches them, and a ConfigError, so scripts/run_legacy.py prints them as
one line and exits with status 2. Nothing is refused that the estimator
accepts (never stricter than the original): ``install()`` wraps only

- ``RunConfig.__init__``: TF_CONFIG must be JSON (the estimator's own
  ``json.loads`` raised the same ValueError); everything else is the
  estimator's own check, its ValueError reworded with the TF_CONFIG it read.
  The evaluator is left out of the training cluster, as the estimator's own
  docs lay it out (local launchers list it beside the others).
- ``parse_input_fn_result``: the estimator's ValueError (a tuple of three, say)
  reworded; whatever it accepts (numpy arrays, lists, numbers, nested
  structures, dicts with keys of any type) goes on to the model_fn untouched.
"""

from __future__ import annotations

import functools
import json
import os

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.cluster.config import EVALUATOR
from ps_toolkit.cluster.tf_config import TF_CONFIG_ENV, parse_tf_config
from ps_toolkit_compat import tf_internals

TF_CONFIG = TF_CONFIG_ENV
# The RunConfig attribute that keeps the TF_CONFIG it was built from (the role patches read it there).
TF_CONFIG_READ = "_ps_toolkit_tf_config"


def _clip(text, limit: int = 160) -> str:
    text = str(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class EstimatorValueError(ConfigError, ValueError):
    """A ValueError the estimator raised, as one line (ConfigError: run_legacy.py prints it, exit 2)."""


def check_tf_config() -> None:
    """Raises EstimatorValueError for a TF_CONFIG that is not JSON, as the estimator's json.loads did."""
    text = os.environ.get(TF_CONFIG)
    if text:  # a blank one too: the estimator's json.loads refuses it
        parse_tf_config(text, TF_CONFIG, EstimatorValueError)


def _training_cluster(tf_config: dict) -> dict:
    cluster = tf_config.get("cluster")
    if not isinstance(cluster, dict) or EVALUATOR not in cluster:
        return tf_config
    return dict(tf_config, cluster={job: hosts for job, hosts in cluster.items() if job != EVALUATOR})


def _wrap_run_config() -> None:
    cls = tf_internals.run_config_class()
    original_init = cls.__init__
    original_setting = tf_internals.run_config_cluster_setting()

    @functools.wraps(original_init)
    def __init__(self, *args, **kwargs):
        check_tf_config()
        original_init(self, *args, **kwargs)

    @functools.wraps(original_setting)
    def init_distributed_setting(self, tf_config):
        setattr(self, TF_CONFIG_READ, tf_config)
        try:
            return original_setting(self, _training_cluster(tf_config))
        except ValueError as err:
            first = str(err).strip().splitlines()[0]
            raise EstimatorValueError(f"{TF_CONFIG}: {first} ({TF_CONFIG}={_clip(json.dumps(tf_config))})") from None

    cls.__init__ = __init__
    tf_internals.set_run_config_cluster_setting(init_distributed_setting)
    cls._ps_toolkit_checked = True


def _describe(value) -> str:
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)} items"
    return f"a value of type {type(value).__name__}"


def _wrap_parse_input_fn_result() -> None:
    original = tf_internals.input_fn_result_parser()

    @functools.wraps(original)
    def parse_input_fn_result(result):
        try:
            features, labels, hooks = original(result)
        except ValueError as err:
            raise EstimatorValueError(
                f"an input_fn returned {_describe(result)}: {str(err).splitlines()[0]} "
                "(an Estimator's input_fn returns (features, labels), features alone, or a tf.data.Dataset of them)"
            ) from None
        return features, labels, hooks

    parse_input_fn_result._ps_toolkit_checked = True
    tf_internals.set_input_fn_result_parser(parse_input_fn_result)


def install() -> None:
    """Wraps RunConfig and parse_input_fn_result of the loaded estimator package. Idempotent."""
    if not getattr(tf_internals.run_config_class(), "_ps_toolkit_checked", False):
        _wrap_run_config()
    if not getattr(tf_internals.input_fn_result_parser(), "_ps_toolkit_checked", False):
        _wrap_parse_input_fn_result()
