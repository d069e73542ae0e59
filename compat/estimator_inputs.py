"""The estimator's bad input as one-line errors: a TF_CONFIG it cannot use, an input_fn of the wrong shape.

TensorFlow's estimator raises a ValueError (or a JSON error) with a traceback
for these; under the compat layer they are ConfigErrors, which
scripts/run_legacy.py prints as one line before exiting with status 2.
``install()`` wraps the two places that read them:

- ``RunConfig.__init__``: TF_CONFIG must be a JSON object; with a ``cluster``
  it must name this task (type and index) and a chief, as the estimator
  requires. The evaluator is left out of the training cluster, as the
  estimator's own docs lay it out (local launchers list it beside the others).
- ``parse_input_fn_result``: an input_fn returns ``(features, labels)``,
  ``features`` alone, or a ``tf.data.Dataset`` of either, where features and
  labels are tensors or dicts of tensors.
"""

from __future__ import annotations

import functools
import json
import os

import tensorflow as tf

from ps_toolkit.base import tf_internals
from ps_toolkit.base.errors import ConfigError
from ps_toolkit.cluster.config import EVALUATOR, ClusterConfig

TF_CONFIG = "TF_CONFIG"
_TENSOR_TYPES = (tf.Tensor, tf.SparseTensor, tf.RaggedTensor)


def _clip(text, limit: int = 160) -> str:
    text = str(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_tf_config() -> None:
    """Raises ConfigError (one line) for a TF_CONFIG the estimator cannot use."""
    text = os.environ.get(TF_CONFIG)
    if not text:
        return
    try:
        payload = json.loads(text)
    except ValueError as err:
        raise ConfigError(f"{TF_CONFIG} is not valid JSON ({err.args[0]}): {_clip(text)}") from None
    if not isinstance(payload, dict):
        raise ConfigError(f"{TF_CONFIG} must be a JSON object, got {_clip(text)}")
    if payload.get("cluster"):
        task = payload.get("task")
        if not isinstance(task, dict) or "type" not in task or "index" not in task:
            raise ConfigError(
                f"{TF_CONFIG} has a cluster but no task with a type and an index "
                f'(like "task": {{"type": "worker", "index": 0}}): {_clip(text)}'
            )
        ClusterConfig.from_dict(payload, TF_CONFIG)  # one-line errors for the cluster and the task in it


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
        try:
            return original_setting(self, _training_cluster(tf_config))
        except ValueError as err:
            first = str(err).strip().splitlines()[0]
            raise ConfigError(f"{TF_CONFIG}: {first} ({TF_CONFIG}={_clip(json.dumps(tf_config))})") from None

    cls.__init__ = __init__
    tf_internals.set_run_config_cluster_setting(init_distributed_setting)
    cls._ps_toolkit_checked = True


def _describe(value) -> str:
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)} items"
    return f"a value of type {type(value).__name__}"


def _check_part(value, what: str, result) -> None:
    allowed = value is None if what == "labels" else False
    leaves = tf.nest.flatten(value) if isinstance(value, dict) else [value]
    if allowed or (leaves and all(isinstance(leaf, _TENSOR_TYPES) for leaf in leaves)):
        return
    raise ConfigError(
        f"an input_fn returned {_describe(result)} whose {what} are {_describe(value)}; an Estimator's input_fn "
        "returns (features, labels), features alone, or a tf.data.Dataset of them, where both are tensors "
        "or dicts of tensors"
    )


def _wrap_parse_input_fn_result() -> None:
    original = tf_internals.input_fn_result_parser()

    @functools.wraps(original)
    def parse_input_fn_result(result):
        try:
            features, labels, hooks = original(result)
        except ValueError as err:
            raise ConfigError(
                f"an input_fn returned {_describe(result)}: {str(err).splitlines()[0]} "
                "(an Estimator's input_fn returns (features, labels), features alone, or a tf.data.Dataset of them)"
            ) from None
        _check_part(features, "features", result)
        _check_part(labels, "labels", result)
        return features, labels, hooks

    parse_input_fn_result._ps_toolkit_checked = True
    tf_internals.set_input_fn_result_parser(parse_input_fn_result)


def install() -> None:
    """Wraps RunConfig and parse_input_fn_result of the loaded estimator package. Idempotent."""
    if not getattr(tf_internals.run_config_class(), "_ps_toolkit_checked", False):
        _wrap_run_config()
    if not getattr(tf_internals.input_fn_result_parser(), "_ps_toolkit_checked", False):
        _wrap_parse_input_fn_result()
