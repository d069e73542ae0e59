"""Per-replica input pipelines over the MNIST arrays of ps_toolkit.models.mnist_files.

Each replica reads its own shard of the training set, shuffled with its own
seed, so no two workers read the same batches (a classic TF1 bug: every
worker calling next_batch() on the same unshuffled arrays).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.models.mnist_files import DataSplits, shard_bounds


def no_autotune() -> tf.data.Options:
    """Dataset options without tf.data's autotuning thread.

    Closing a session waits for that thread, which sleeps in timed waits: after
    a ps restart or a network partition it holds up the session re-creation of
    a worker by seconds (docs/reliability.md). The pipeline's sizes are fixed
    here anyway, so there is nothing to tune.
    """
    options = tf.data.Options()
    options.autotune.enabled = False
    return options


def _as_bytes(images: np.ndarray) -> np.ndarray:
    """[0, 1] floats back to the IDX files' bytes: a quarter of the size in the graph."""
    return np.round(images * 255.0).astype(np.uint8)


# Plain tensor arithmetic, nothing for AutoGraph to convert: converting it costs every task
# about 0.05 s of start-up per dataset.
@tf.autograph.experimental.do_not_convert
def _features(images, labels):
    return {"image": tf.cast(images, tf.float32) / 255.0}, labels


def train_input_fn(splits: DataSplits, input_context, *, seed: int = 0) -> tf.data.Dataset:
    """This replica's endless, shuffled batches of ``({"image": [batch, 784]}, labels)`` (an input_fn).

    Each replica reads its own contiguous shard of the training set,
    shuffled with its own seed: replicas shuffle differently, runs are reproducible.
    """
    batch_size = input_context.get_per_replica_batch_size()
    start, end = shard_bounds(
        len(splits.train_images), input_context.num_input_pipelines, input_context.input_pipeline_id
    )
    images, labels = splits.train_images[start:end], splits.train_labels[start:end]
    if len(images) < batch_size:
        raise ConfigError(f"--batch_size={batch_size} is larger than this replica's shard of {len(images)} examples")
    return (
        tf.data.Dataset.from_tensor_slices((_as_bytes(images), labels))
        .shuffle(len(images), seed=seed * 1000 + input_context.input_pipeline_id, reshuffle_each_iteration=True)
        .repeat()
        .batch(batch_size, drop_remainder=True)
        .map(_features)
        .prefetch(2)
        .with_options(no_autotune())
    )


def eval_input_fn(splits: DataSplits, batch_size: int = 2000) -> tf.data.Dataset:
    """The test set once, in batches of ``({"image": ...}, labels)`` (an eval_input_fn)."""
    return (
        tf.data.Dataset.from_tensor_slices((_as_bytes(splits.test_images), splits.test_labels))
        .batch(batch_size)
        .map(_features)
        .with_options(no_autotune())
    )
