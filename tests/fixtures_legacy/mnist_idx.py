"""Writes small MNIST-format IDX gzip folders for tests: the embedded digits, shifted to make more of them."""

from __future__ import annotations

import os

import numpy as np

from ps_toolkit.models.idx import read_idx, write_idx_gz

_EMBEDDED = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    "ps_toolkit",
    "models",
    "embedded_digits",
)
# One-pixel shifts: five times the 1,497 training digits, so TF 1.x's default
# validation split (the first 5,000) still leaves a training set.
SHIFTS = ((0, 0), (1, 0), (-1, 0), (0, 1), (0, -1))


def _embedded(stem: str) -> np.ndarray:
    return read_idx(os.path.join(_EMBEDDED, stem + ".gz"))


def write_digits_idx(folder: str, *, seed: int = 0) -> str:
    """Writes the four IDX files to ``folder``: 7,485 shuffled shifted training digits, 300 test digits."""
    os.makedirs(folder, exist_ok=True)
    images, labels = _embedded("train-images-idx3-ubyte"), _embedded("train-labels-idx1-ubyte")
    shifted = np.concatenate([np.roll(images, (dy, dx), axis=(1, 2)) for dx, dy in SHIFTS])
    order = np.random.default_rng(seed).permutation(len(shifted))
    write_idx_gz(os.path.join(folder, "train-images-idx3-ubyte.gz"), shifted[order])
    write_idx_gz(os.path.join(folder, "train-labels-idx1-ubyte.gz"), np.tile(labels, len(SHIFTS))[order])
    for stem in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        write_idx_gz(os.path.join(folder, stem + ".gz"), _embedded(stem))
    return folder
