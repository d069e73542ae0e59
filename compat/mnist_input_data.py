"""``tensorflow.examples.tutorials.mnist.input_data``: TF 1.x's MNIST reader, on local IDX gzip files only.

    from tensorflow.examples.tutorials.mnist import input_data
    mnist = input_data.read_data_sets("/data/mnist", one_hot=True)
    images, labels = mnist.train.next_batch(100)

TF 1.x downloaded missing files; this reader never touches the network: a
missing file is one clear error naming the folder and the file, never a hang
on a download that cannot succeed.
"""

from __future__ import annotations

import collections
import os

import numpy as np

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.models.idx import read_idx
from ps_toolkit.models.mnist_files import IDX_FILES, NUM_CLASSES, find_idx_file

Datasets = collections.namedtuple("Datasets", ["train", "validation", "test"])
_FLOAT32 = "float32"


def dense_to_one_hot(labels_dense: np.ndarray, num_classes: int = NUM_CLASSES) -> np.ndarray:
    """Class indices -> one-hot rows (float64, as TF 1.x returned them)."""
    one_hot = np.zeros((len(labels_dense), num_classes))
    one_hot[np.arange(len(labels_dense)), labels_dense.astype(np.int64)] = 1
    return one_hot


class DataSet:
    """One split: ``images``, ``labels``, ``num_examples``, ``epochs_completed`` and ``next_batch``.

    Batches are drawn from a per-instance shuffle. With ``seed=None`` every
    process shuffles differently, so the workers of a cluster read different
    batches (the data advice of the textbooks).
    """

    def __init__(self, images, labels, *, one_hot=False, dtype=_FLOAT32, reshape=True, seed=None):
        if len(images) != len(labels):
            raise ConfigError(f"images ({len(images)}) and labels ({len(labels)}) differ in number")
        if reshape:
            images = images.reshape(len(images), int(np.prod(images.shape[1:])))
        if _dtype_name(dtype) == _FLOAT32:
            images = images.astype(np.float32) * (1.0 / 255.0)
        self._images = images
        self._labels = dense_to_one_hot(labels) if one_hot else labels
        self._rng = np.random.default_rng(seed)
        self._epochs_completed = 0
        self._index_in_epoch = 0
        self._order = np.arange(len(images))

    images = property(lambda self: self._images)
    labels = property(lambda self: self._labels)
    num_examples = property(lambda self: len(self._images))
    epochs_completed = property(lambda self: self._epochs_completed)

    def next_batch(self, batch_size: int, fake_data: bool = False, shuffle: bool = True):
        """The next ``batch_size`` examples; an epoch's tail is joined to the next epoch's head, as in TF 1.x."""
        if fake_data:
            raise ConfigError("next_batch(fake_data=True) is not supported by the compat layer; use real IDX files")
        if not 0 < batch_size <= self.num_examples:
            raise ConfigError(f"next_batch({batch_size}): batch size must be 1..{self.num_examples}")
        if self._index_in_epoch == 0 and shuffle:
            self._order = self._rng.permutation(self.num_examples)
        end = self._index_in_epoch + batch_size
        if end <= self.num_examples:
            picked = self._order[self._index_in_epoch : end]
            self._index_in_epoch = end % self.num_examples
            if self._index_in_epoch == 0:
                self._epochs_completed += 1
            return self._images[picked], self._labels[picked]
        rest = self._order[self._index_in_epoch :]
        self._epochs_completed += 1
        self._order = self._rng.permutation(self.num_examples) if shuffle else np.arange(self.num_examples)
        self._index_in_epoch = batch_size - len(rest)
        picked = np.concatenate([rest, self._order[: self._index_in_epoch]])
        return self._images[picked], self._labels[picked]


def read_data_sets(
    train_dir,
    fake_data=False,
    one_hot=False,
    dtype=_FLOAT32,
    reshape=True,
    validation_size=5000,
    seed=None,
    source_url=None,
):
    """TF 1.x's ``read_data_sets``: the four IDX files in ``train_dir`` as train/validation/test.

    The first ``validation_size`` training examples become the validation split.
    """
    del source_url  # nothing is downloaded
    if fake_data:
        raise ConfigError("read_data_sets(fake_data=True) is not supported by the compat layer; use real IDX files")
    arrays = {key: _read(train_dir, key) for key in IDX_FILES}
    train_images, train_labels = arrays["train_images"], arrays["train_labels"]
    if not 0 <= validation_size <= len(train_images):
        raise ConfigError(
            f"read_data_sets({train_dir!r}): validation_size={validation_size} must be between 0 and "
            f"the {len(train_images)} training images"
        )
    options = {"one_hot": one_hot, "dtype": dtype, "reshape": reshape, "seed": seed}
    return Datasets(
        train=DataSet(train_images[validation_size:], train_labels[validation_size:], **options),
        validation=DataSet(train_images[:validation_size], train_labels[:validation_size], **options),
        test=DataSet(arrays["test_images"], arrays["test_labels"], **options),
    )


def _read(train_dir: str, key: str) -> np.ndarray:
    stem = IDX_FILES[key]
    if not os.path.isdir(train_dir):
        raise ConfigError(
            f"read_data_sets: MNIST folder {train_dir} does not exist; put {stem}.gz and the other three "
            "IDX files there (this compat layer does not download)"
        )
    try:
        path = find_idx_file(train_dir, stem)
    except ConfigError:
        raise ConfigError(
            f"read_data_sets: {train_dir} has no {stem}.gz; put the four MNIST IDX files there "
            "(this compat layer does not download)"
        ) from None
    return read_idx(path, expected_ndim=3 if "images" in key else 1)


def _dtype_name(dtype) -> str:
    return getattr(dtype, "name", str(dtype))
