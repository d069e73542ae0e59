"""Regenerates the embedded data set: scikit-learn's handwritten digits as MNIST IDX files.

Why this data: it is real handwriting (UCI "Optical Recognition of Handwritten
Digits", 1,797 images, distributed with scikit-learn under the BSD licence),
small enough to ship (~250 KB), and it trains to >90% test accuracy in seconds.
Each 8x8 image is upscaled to 20x20 and centred in a 28x28 frame, the way MNIST
centres its digits, and written in MNIST's own IDX gzip format so that the
same reader loads it and real MNIST.

Only maintainers run this (it needs scikit-learn and Pillow):
    python scripts/make_embedded_digits.py --out_dir=ps_toolkit/models/embedded_digits
"""

import os

import numpy as np
from absl import app, flags
from PIL import Image

from ps_toolkit import cli
from ps_toolkit.models.idx import write_idx_gz

_OUT_DIR = flags.DEFINE_string("out_dir", "ps_toolkit/models/embedded_digits", "Where to write the IDX files.")
_NUM_TEST = flags.DEFINE_integer("num_test", 300, "Images held out for the test split.")


def to_mnist_frame(image_8x8: np.ndarray) -> np.ndarray:
    """Upscales one 8x8 digit (values 0-16) to 20x20 and centres it in 28x28, as uint8."""
    scaled = Image.fromarray((image_8x8 * (255.0 / 16.0)).astype(np.float32), mode="F")
    digit = np.asarray(scaled.resize((20, 20), Image.BILINEAR))
    frame = np.zeros((28, 28), np.float32)
    frame[4:24, 4:24] = digit
    return np.clip(frame, 0, 255).round().astype(np.uint8)


def main(argv):
    del argv
    from sklearn.datasets import load_digits

    digits = load_digits()
    order = np.random.RandomState(0).permutation(len(digits.images))
    images = np.stack([to_mnist_frame(digits.images[i]) for i in order])
    labels = digits.target[order].astype(np.uint8)
    split = len(images) - _NUM_TEST.value
    os.makedirs(_OUT_DIR.value, exist_ok=True)
    parts = {
        "train-images-idx3-ubyte.gz": images[:split],
        "train-labels-idx1-ubyte.gz": labels[:split],
        "t10k-images-idx3-ubyte.gz": images[split:],
        "t10k-labels-idx1-ubyte.gz": labels[split:],
    }
    for name, array in parts.items():
        write_idx_gz(os.path.join(_OUT_DIR.value, name), array)
    print(f"wrote {split} training and {_NUM_TEST.value} test images to {_OUT_DIR.value}")


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags_or_exit)
