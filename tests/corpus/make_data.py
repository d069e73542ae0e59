"""Tiny local stand-ins for the data sets the corpus scripts download: MNIST IDX, MNIST TFRecords, census CSV."""

import gzip
import os
import struct

import numpy as np

EMBEDDED_DIGITS = os.path.join(os.path.dirname(__file__), "..", "..", "ps_toolkit", "models", "embedded_digits")
# input_data.read_data_sets keeps 5000 training images aside for validation, as the original did, so the
# training set must be larger than that: the embedded digits are repeated up to this count.
MNIST_TRAIN_IMAGES = 5600


def _read_idx(name):
    with gzip.open(os.path.join(EMBEDDED_DIGITS, name), "rb") as stream:
        data = stream.read()
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4 : 4 + 4 * dims])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def _write_idx(path, array):
    header = bytes([0, 0, 8, array.ndim]) + struct.pack(">" + "I" * array.ndim, *array.shape)
    with gzip.open(path, "wb") as stream:
        stream.write(header + array.astype(np.uint8).tobytes())


def _digits(split, count=None):
    prefix = "train" if split == "train" else "t10k"
    images = _read_idx(f"{prefix}-images-idx3-ubyte.gz")
    labels = _read_idx(f"{prefix}-labels-idx1-ubyte.gz")
    if count is not None:
        repeat = np.arange(count) % len(images)
        images, labels = images[repeat], labels[repeat]
    return images, labels


def mnist_idx(folder):
    """The four gzipped IDX files that tensorflow.examples.tutorials.mnist.input_data reads."""
    os.makedirs(folder, exist_ok=True)
    for split, prefix, count in (("train", "train", MNIST_TRAIN_IMAGES), ("test", "t10k", None)):
        images, labels = _digits(split, count)
        _write_idx(os.path.join(folder, f"{prefix}-images-idx3-ubyte.gz"), images)
        _write_idx(os.path.join(folder, f"{prefix}-labels-idx1-ubyte.gz"), labels)
    return folder


def mnist_tfrecords(folder):
    """train.tfrecords and test.tfrecords with image_raw (784 bytes) and label, as convert_to_records wrote them."""
    import tensorflow as tf

    os.makedirs(folder, exist_ok=True)
    for split in ("train", "test"):
        images, labels = _digits(split)
        with tf.io.TFRecordWriter(os.path.join(folder, f"{split}.tfrecords")) as writer:
            for image, label in zip(images, labels, strict=True):
                feature = {
                    "image_raw": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image.tobytes()])),
                    "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
                }
                writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    return folder


_CENSUS_CHOICES = (
    (" State-gov", " Private", " Self-emp-not-inc"),
    (" Bachelors", " HS-grad", " Masters"),
    (" Never-married", " Married-civ-spouse", " Divorced"),
    (" Adm-clerical", " Exec-managerial", " Tech-support"),
    (" Not-in-family", " Husband", " Own-child"),
    (" White", " Black", " Asian-Pac-Islander"),
    (" Male", " Female"),
    (" United-States", " India", " Mexico"),
)


def census_csv(path, rows=400, seed=0):
    """An adult.data-shaped CSV (15 columns, leading spaces, ' <=50K'/' >50K' labels) of random rows."""
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(rows):
        age, hours = int(rng.integers(18, 80)), int(rng.integers(10, 70))
        work, edu, marital, occupation, relationship, race, gender, country = (
            choices[rng.integers(len(choices))] for choices in _CENSUS_CHOICES
        )
        label = " >50K" if age + hours > 90 else " <=50K"
        fields = [age, work, int(rng.integers(20000, 400000)), edu, int(rng.integers(1, 16)), marital, occupation]
        fields += [relationship, race, gender, int(rng.integers(0, 5000)), 0, hours, country, label]
        lines.append(", ".join(str(field).strip() for field in fields))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as stream:
        stream.write("\n".join(lines) + "\n")
    return path
