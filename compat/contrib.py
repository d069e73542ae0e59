"""``tf.contrib``: the parts the toolkit provides (``training`` placement strategies); the rest fail in one line."""

from __future__ import annotations

import types

from ps_toolkit.placement import strategies
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
        "GreedyLoadBalancingStrategy": strategies.GreedyLoadBalancingStrategy,
        "byte_size_load_fn": strategies.byte_size_load_fn,
        "RandomStrategy": strategies.RandomStrategy,
    },
)
contrib = _Namespace("tensorflow.contrib", "contrib", {"training": training})
MODULES = {"tensorflow.contrib": contrib, "tensorflow.contrib.training": training}
