"""Test helper: what an estimator's evaluator wrote (``<model_dir>/eval`` summaries) and the chief's last checkpoint."""

from __future__ import annotations

import glob
import os

import tensorflow as tf


def evaluated_steps(model_dir) -> dict:
    """{global step: {metric: value}} from the evaluator's summaries."""
    found = {}
    for path in glob.glob(os.path.join(str(model_dir), "eval", "events.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            values = {v.tag: v.simple_value for v in event.summary.value if v.HasField("simple_value")}
            if values:
                found.setdefault(event.step, {}).update(values)
    return found


def final_checkpoint(model_dir) -> tuple[str, int]:
    """The newest checkpoint's path prefix and global step."""
    path = tf.train.latest_checkpoint(str(model_dir))
    if path is None:
        raise AssertionError(f"no checkpoint in {model_dir}: {os.listdir(model_dir)}")
    return path, int(path.rsplit("-", 1)[1])


def stored_global_step(checkpoint_path: str) -> int:
    """The global step saved inside a checkpoint: what the evaluator records its metrics under.

    It can be past the step in the file's name: the chief's saver reads the step, then saves
    the variables in a second run, and an async worker may step in between.
    """
    return int(tf.train.load_variable(checkpoint_path, "global_step"))
