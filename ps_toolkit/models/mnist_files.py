"""The MNIST data on disk: IDX folders and the embedded digits, read into arrays. No TensorFlow.

What a process needs to find, check or write the data (the benchmark's controller,
the compat layer's reader, ``--help``) without importing TensorFlow;
ps_toolkit.models.mnist_data builds the replicas' input pipelines from it.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

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
