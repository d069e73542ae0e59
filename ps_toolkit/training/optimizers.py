"""The optimizers ``--optimizer`` names, as TF1 ``tf.compat.v1.train`` optimizers.

Each works async and sync (``SyncReplicasOptimizer`` wraps it). Their slots
(Adagrad's accumulators, Adam's moments, ...) are made beside the variable
they belong to, so they live on the same ps shard as its partition.
TensorFlow is imported by ``make`` only: the names are checked before.
"""

from __future__ import annotations

from ps_toolkit.base.errors import ConfigError

# Learning rates where each optimizer's own documentation or common practice starts.
DEFAULT_LEARNING_RATES = {
    "sgd": 0.01,
    "momentum": 0.01,
    "adagrad": 0.1,
    "adam": 0.001,
    "ftrl": 0.1,
    "rmsprop": 0.001,
}
OPTIMIZER_NAMES = tuple(DEFAULT_LEARNING_RATES)


def check_name(name: str) -> None:
    if name not in DEFAULT_LEARNING_RATES:
        raise ConfigError(f"unknown optimizer {name!r} (from --optimizer); valid: {', '.join(OPTIMIZER_NAMES)}")


def make(name: str, learning_rate: float):
    """A ``tf.compat.v1.train.Optimizer`` named ``name``."""
    check_name(name)
    import tensorflow as tf

    train = tf.compat.v1.train
    if name == "sgd":
        return train.GradientDescentOptimizer(learning_rate)
    if name == "momentum":
        return train.MomentumOptimizer(learning_rate, momentum=0.9)
    if name == "adagrad":
        return train.AdagradOptimizer(learning_rate)
    if name == "adam":
        return train.AdamOptimizer(learning_rate)
    if name == "ftrl":
        return train.FtrlOptimizer(learning_rate)
    return train.RMSPropOptimizer(learning_rate)
