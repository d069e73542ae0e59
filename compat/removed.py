"""Symbols TensorFlow 1.x had and 2.21 lacks, each mapped to a one-line error naming its replacement."""

from __future__ import annotations

from ps_toolkit.base.errors import ConfigError

# Where each removed name went. Keys are dotted names below ``tf``; a key
# also covers everything under it (``contrib.slim`` covers ``contrib.slim.nets``).
REPLACEMENTS = {
    "contrib": "the maintained package that replaced that part (see below), or tf.keras",
    "contrib.slim": "the tf-slim package (pip install tf-slim) or tf.keras layers",
    "contrib.layers": "tf.compat.v1.layers (tf-keras) or tf.keras.layers",
    "contrib.learn": "tf.estimator (provided: the tensorflow-estimator package) or a tf.keras Model",
    "contrib.rnn": "tf.keras.layers.LSTMCell / GRUCell / RNN",
    "contrib.seq2seq": "tensorflow-addons' seq2seq (archived) or keras-nlp",
    "contrib.distribute": "tf.distribute",
    "contrib.data": "tf.data",
    "contrib.framework": "tf.compat.v1 (most of it moved there)",
    "contrib.metrics": "tf.compat.v1.metrics or tf.keras.metrics",
    "contrib.losses": "tf.compat.v1.losses or tf.keras.losses",
    "contrib.opt": "tf.keras.optimizers or tf.compat.v1.train optimizers",
    "contrib.tpu": "tf.distribute.TPUStrategy",
    "contrib.lookup": "tf.lookup",
    "contrib.summary": "tf.summary",
    "contrib.eager": "TensorFlow 2 eager execution (tf.function)",
    "contrib.predictor": "tf.saved_model.load",
    "contrib.training.HParams": "a dataclass or absl flags",
    "contrib.training": (
        "ps_toolkit.placement.ps_strategies (GreedyLoadBalancingStrategy, byte_size_load_fn, RandomStrategy)"
    ),
    "examples": "tensorflow.examples.tutorials.mnist.input_data (provided) or tf.keras.datasets",
    "keras.estimator": "tf.estimator.Estimator with a model_fn, or tf.keras Model.fit",
    "train.queue_runner": "tf.compat.v1.train.QueueRunner or tf.data",
}
DEFAULT_REPLACEMENT = "its tf.compat.v1 or TensorFlow 2 equivalent (see the TF 2 migration guide)"


def replacement_for(name: str) -> str:
    """The replacement of a dotted name below ``tf``: the entry for it or its closest parent."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        found = REPLACEMENTS.get(".".join(parts[:end]))
        if found:
            return found
    return DEFAULT_REPLACEMENT


def message(name: str) -> str:
    """One line: what is gone and what to use instead."""
    return f"tf.{name} was removed from TensorFlow 2.21 and is not in the compat layer; use {replacement_for(name)}"


class RemovedSymbolError(ConfigError, AttributeError):
    """``tf.<name>`` no longer exists. An AttributeError, so ``hasattr`` and ``getattr(..., default)`` still work."""

    def __init__(self, name: str):
        super().__init__(message(name))
        self.symbol = name


class RemovedModuleError(ConfigError, ImportError):
    """``import tensorflow.<name>`` of a module that no longer exists.

    Deliberately not a ModuleNotFoundError: Python's ``from x import y``
    swallows those and replaces the message with "cannot import name".
    """

    def __init__(self, name: str):
        super().__init__(message(name))
        self.symbol = name
