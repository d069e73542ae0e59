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

from ps_toolkit.errors import ConfigError
from ps_toolkit.idx import read_idx

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


class _IteratorInitHook(tf.compat.v1.train.SessionRunHook):
    """Feeds the arrays into the iterator each time a session is (re)created.

    Feeding through placeholders keeps the arrays out of the GraphDef, which
    every session creation would otherwise ship over gRPC.
    """

    def __init__(self, initializer, feed_dict):
        self._initializer = initializer
        self._feed_dict = feed_dict

    def after_create_session(self, session, coord):
        session.run(self._initializer, feed_dict=self._feed_dict)


def _no_autotune() -> tf.data.Options:
    """Dataset options without tf.data's autotuning thread.

    Closing a session waits for that thread, which sleeps in timed waits: after
    a ps restart or a network partition it held up the session re-creation of
    a worker by 9-39 s (seen in a stack dump). The pipeline's sizes are fixed
    here anyway, so there is nothing to tune.
    """
    options = tf.data.Options()
    options.autotune.enabled = False
    return options


def make_train_input(
    images: np.ndarray,
    labels: np.ndarray,
    *,
    batch_size: int,
    replica_index: int,
    num_replicas: int,
    seed: int,
):
    """This replica's endless, shuffled batches: returns (next_batch, init hook).

    ``next_batch()`` builds a get-next op and returns (images, labels). Call it
    where the batch is used: inside an in-graph loop's body, each iteration
    then takes a new batch; a batch tensor made outside the loop would enter
    it as a constant, and every step of a run would train on the same batch.
    """
    start, end = shard_bounds(len(images), num_replicas, replica_index)
    shard_images, shard_labels = images[start:end], labels[start:end]
    if len(shard_images) < batch_size:
        raise ConfigError(
            f"--batch_size={batch_size} is larger than this replica's shard of {len(shard_images)} examples"
        )
    images_in = tf.compat.v1.placeholder(tf.float32, shard_images.shape, name="shard_images")
    labels_in = tf.compat.v1.placeholder(tf.int64, shard_labels.shape, name="shard_labels")
    dataset = (
        tf.data.Dataset.from_tensor_slices((images_in, labels_in))
        # A per-replica seed: replicas shuffle differently, runs are reproducible.
        .shuffle(len(shard_images), seed=seed * 1000 + replica_index, reshuffle_each_iteration=True)
        .repeat()
        .batch(batch_size, drop_remainder=True)
        .prefetch(2)
        .with_options(_no_autotune())
    )
    iterator = tf.compat.v1.data.make_initializable_iterator(dataset)
    hook = _IteratorInitHook(iterator.initializer, {images_in: shard_images, labels_in: shard_labels})
    return iterator.get_next, hook
