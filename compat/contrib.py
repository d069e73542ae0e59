"""``tf.contrib``: the parts the compat layer provides; the rest fail in one line naming the name and its replacement.

Provided: ``training``'s placement strategies (the toolkit's), and the names whose implementation
TensorFlow 2.21 still has (``compat.contrib_names``: lookup, framework, learn's MNIST datasets;
``compat.contrib_layers``: layers' initializers, regularizers and common layers, losses, metrics).
"""

from __future__ import annotations

import types

from ps_toolkit.placement import ps_strategies
from ps_toolkit_compat import contrib_layers, contrib_learn_datasets, contrib_names
from ps_toolkit_compat.removed import RemovedSymbolError


class _Namespace(types.ModuleType):
    """A module whose missing attributes raise RemovedSymbolError naming ``tf.<prefix>.<name>``."""

    def __init__(self, name: str, prefix: str, members: dict):
        super().__init__(name)
        self.__dict__.update(members)
        self.__path__ = []  # a package, so ``from x import y`` asks the import system (and its one-line error)
        self._prefix = prefix

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise RemovedSymbolError(f"{self._prefix}.{name}")


training = _Namespace(
    "tensorflow.contrib.training",
    "contrib.training",
    {
        "GreedyLoadBalancingStrategy": ps_strategies.GreedyLoadBalancingStrategy,
        "byte_size_load_fn": ps_strategies.byte_size_load_fn,
        "RandomStrategy": ps_strategies.RandomStrategy,
    },
)
lookup = _Namespace("tensorflow.contrib.lookup", "contrib.lookup", contrib_names.LOOKUP)
framework = _Namespace("tensorflow.contrib.framework", "contrib.framework", contrib_names.FRAMEWORK)
layers = _Namespace("tensorflow.contrib.layers", "contrib.layers", contrib_layers.LAYERS)
losses = _Namespace("tensorflow.contrib.losses", "contrib.losses", contrib_layers.LOSSES)
metrics = _Namespace("tensorflow.contrib.metrics", "contrib.metrics", contrib_layers.METRICS)
datasets = _Namespace("tensorflow.contrib.learn.datasets", "contrib.learn.datasets", contrib_names.LEARN_DATASETS)


class ModeKeys:
    """tf.contrib.learn's mode names: the estimator's own values (INFER is tf.estimator's PREDICT, 'infer')."""

    TRAIN = "train"
    EVAL = "eval"
    INFER = "infer"


model_fn = _Namespace(
    "tensorflow.contrib.learn.python.learn.estimators.model_fn",
    "contrib.learn.estimators.model_fn",
    {"ModeKeys": ModeKeys},
)
estimators = _Namespace(
    "tensorflow.contrib.learn.python.learn.estimators", "contrib.learn.estimators", {"model_fn": model_fn}
)
learn_python_learn = _Namespace(
    "tensorflow.contrib.learn.python.learn", "contrib.learn", {"datasets": datasets, "estimators": estimators}
)
learn_python = _Namespace("tensorflow.contrib.learn.python", "contrib.learn.python", {"learn": learn_python_learn})
learn = _Namespace(
    "tensorflow.contrib.learn", "contrib.learn", {"datasets": datasets, "ModeKeys": ModeKeys, "python": learn_python}
)
members = {"training": training, "lookup": lookup, "framework": framework, "layers": layers, "losses": losses}
contrib = _Namespace("tensorflow.contrib", "contrib", {**members, "metrics": metrics, "learn": learn})
MODULES = {
    "tensorflow.contrib": contrib,
    **{f"tensorflow.contrib.{name}": module for name, module in members.items()},
    "tensorflow.contrib.metrics": metrics,
    "tensorflow.contrib.learn": learn,
    "tensorflow.contrib.learn.datasets": datasets,
    "tensorflow.contrib.learn.datasets.mnist": contrib_learn_datasets.mnist,
    # The path TF 1.x's own examples imported it by.
    "tensorflow.contrib.learn.python": learn_python,
    "tensorflow.contrib.learn.python.learn": learn_python_learn,
    "tensorflow.contrib.learn.python.learn.estimators": estimators,
    "tensorflow.contrib.learn.python.learn.estimators.model_fn": model_fn,
    "tensorflow.contrib.learn.python.learn.datasets": datasets,
    "tensorflow.contrib.learn.python.learn.datasets.mnist": contrib_learn_datasets.mnist,
}
