"""Data sets and per-replica input pipelines: MNIST IDX folders, the embedded digits.

Each replica reads its own shard of the training set, shuffled with its own
seed, so no two workers read the same batches (a classic TF1 bug: every
worker calling next_batch() on the same unshuffled arrays).
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import tensorflow as tf

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.models.idx import read_idx

EMBEDDED_DIGITS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "embedded_digits")
IDX_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
IMAGE_PIXELS = 28 * 28
NUM_CLASSES = 10


@dataclasses.dataclass(frozen=True)
class DataSplits:
    """Flattened float32 images in [0, 1] and int64 labels."""

    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    source: str


def find_idx_file(data_dir: str, stem: str) -> str:
    """The path of one IDX file in ``data_dir``, gzipped or not."""
    for name in (stem + ".gz", stem):
        path = os.path.join(data_dir, name)
        if os.path.isfile(path):
            return path
    raise ConfigError(f"data dir {data_dir} has no {stem}.gz (nor {stem}); expected the four MNIST IDX files")


def load_idx_dir(data_dir: str) -> DataSplits:
    """Loads the four MNIST IDX files from a folder (the format the textbooks use)."""
    if not os.path.isdir(data_dir):
        raise ConfigError(f"data dir {data_dir} (from --data_dir) does not exist")
    arrays = {}
    for key, stem in IDX_FILES.items():
        arrays[key] = read_idx(find_idx_file(data_dir, stem), expected_ndim=3 if "images" in key else 1)
    for split in ("train", "test"):
        images, labels = arrays[f"{split}_images"], arrays[f"{split}_labels"]
        if len(images) != len(labels):
            raise ConfigError(f"data dir {data_dir}: {split} has {len(images)} images but {len(labels)} labels")
        if images.shape[1:] != (28, 28):
            raise ConfigError(f"data dir {data_dir}: {split} images are {images.shape[1:]}, expected 28x28")
    return DataSplits(
        train_images=_flatten(arrays["train_images"]),
        train_labels=arrays["train_labels"].astype(np.int64),
        test_images=_flatten(arrays["test_images"]),
        test_labels=arrays["test_labels"].astype(np.int64),
        source=data_dir,
    )


def load_dataset(data_dir: str | None) -> DataSplits:
    """MNIST IDX files from ``data_dir``, or the embedded digits when it is empty."""
    if data_dir:
        return load_idx_dir(data_dir)
    splits = load_idx_dir(EMBEDDED_DIGITS_DIR)
    return dataclasses.replace(splits, source="embedded digits (scikit-learn, 28x28)")


def _flatten(images: np.ndarray) -> np.ndarray:
    return images.reshape(len(images), IMAGE_PIXELS).astype(np.float32) / 255.0


def shard_bounds(num_examples: int, num_shards: int, shard_index: int) -> tuple[int, int]:
    """The [start, end) slice of a contiguous, near-equal shard."""
    if not 0 <= shard_index < num_shards:
        raise ValueError(f"shard {shard_index} out of range for {num_shards} shards")
    base, extra = divmod(num_examples, num_shards)
    start = shard_index * base + min(shard_index, extra)
    return start, start + base + (1 if shard_index < extra else 0)


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
