"""The benchmark's synthetic MNIST-shaped data and the model shapes it trains, shared by every system."""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from ps_toolkit.models.idx import write_idx_gz
from ps_toolkit.models.mnist_files import IDX_FILES, IMAGE_PIXELS, NUM_CLASSES, DataSplits

# Small enough that TF2's dataset function can embed it; large enough that each
# of two replicas has many batches per epoch.
NUM_TRAIN = 4096
NUM_TEST = 1000
_NOISE = 0.35


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """One benchmarked model: its name in ps_toolkit.models.classifiers, batch size, learning rate, layer sizes."""

    name: str
    batch_size: int
    learning_rate: float
    layers: tuple[int, ...]

    @property
    def num_params(self) -> int:
        sizes = (IMAGE_PIXELS, *self.layers)
        return sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:], strict=True))

    @property
    def bytes_per_step(self) -> int:
        """float32 bytes one async step moves: every parameter pulled, every gradient pushed."""
        return 2 * 4 * self.num_params


@dataclasses.dataclass(frozen=True)
class EmbeddingSpec:
    """The embedding model (embedding_model.py): a vocab x dim table, ids_per_example lookups per example."""

    name: str
    batch_size: int
    learning_rate: float
    vocab: int
    dim: int
    ids_per_example: int

    @property
    def bytes_per_step(self) -> int:
        """float32 bytes one step must move: the rows it looks up, and their gradient back."""
        return 2 * 4 * self.batch_size * self.ids_per_example * self.dim


EMBEDDING = EmbeddingSpec("embedding", batch_size=512, learning_rate=1.0, vocab=1_000_000, dim=32, ids_per_example=20)

MODELS = {
    "softmax": ModelSpec("softmax", 100, 0.5, (NUM_CLASSES,)),
    "mlp": ModelSpec("mlp", 128, 0.1, (256, 256, NUM_CLASSES)),
    "wide": ModelSpec("wide", 128, 0.1, (4096, NUM_CLASSES)),
    "embedding": EMBEDDING,
}


def make_data(seed: int = 0) -> DataSplits:
    """Ten noisy class prototypes in [0, 1]: learnable, so accuracy shows whether training worked."""
    rng = np.random.default_rng(seed)
    prototypes = rng.random((NUM_CLASSES, IMAGE_PIXELS), dtype=np.float32)

    def split(count):
        labels = rng.integers(0, NUM_CLASSES, count)
        noise = rng.normal(0.0, _NOISE, (count, IMAGE_PIXELS)).astype(np.float32)
        # Quantized to k/255, exactly as ps_toolkit.models.mnist_files reads uint8 IDX files:
        # the toolkit, which reads them through --data_dir, trains on the same floats.
        pixels = np.round(np.clip(prototypes[labels] + noise, 0.0, 1.0) * 255).astype(np.uint8)
        return pixels.astype(np.float32) / 255.0, labels.astype(np.int64)

    train_images, train_labels = split(NUM_TRAIN)
    test_images, test_labels = split(NUM_TEST)
    return DataSplits(train_images, train_labels, test_images, test_labels, source=f"synthetic (seed {seed})")


def write_idx_dir(data_dir: str, seed: int = 0) -> str:
    """Writes ``make_data(seed)`` as the four MNIST IDX files, for ``scripts/run_task.py --data_dir``."""
    os.makedirs(data_dir, exist_ok=True)
    data = make_data(seed)
    arrays = {
        "train_images": data.train_images,
        "train_labels": data.train_labels,
        "test_images": data.test_images,
        "test_labels": data.test_labels,
    }
    for key, stem in IDX_FILES.items():
        array = arrays[key]
        if "images" in key:
            array = np.round(array * 255).reshape(len(array), 28, 28)
        write_idx_gz(os.path.join(data_dir, stem + ".gz"), array.astype(np.uint8))
    return data_dir
