"""TFRA's private module paths (``dynamic_embedding.python.ops.*``, ``utils``), serving the public surface's objects.

TFRA's own tests and many user scripts import from where TFRA defines a name
(``...python.ops.dynamic_embedding_variable import Variable``). Each such
module here holds the same objects as ``dynamic_embedding`` does; a name TFRA
defined there and the compat layer does not serve is refused in one line.
"""

from __future__ import annotations

import platform
import sys

import tensorflow as tf

from ps_toolkit_compat.tfra import lookups

_OPS = "dynamic_embedding.python.ops"

# Module below the package -> the public names of ``dynamic_embedding`` it holds in TFRA.
_FROM_PUBLIC = {
    "dynamic_embedding.python": (),
    _OPS: (),
    f"{_OPS}.dynamic_embedding_variable": (
        "Variable",
        "get_variable",
        "GraphKeys",
        "embedding_lookup",
        "TrainableWrapper",
        "ModelMode",
        "get_model_mode",
    ),
    f"{_OPS}.dynamic_embedding_ops": (
        "embedding_lookup",
        "embedding_lookup_unique",
        "embedding_lookup_sparse",
        "safe_embedding_lookup_sparse",
        "trainable_wrapper_filter",
        "TrainableWrapper",
        "ModelMode",
        "get_model_mode",
        "enable_train_mode",
        "enable_inference_mode",
    ),
    f"{_OPS}.dynamic_embedding_optimizer": ("DynamicEmbeddingOptimizer",),
    f"{_OPS}.restrict_policies": ("RestrictPolicy", "TimestampRestrictPolicy", "FrequencyRestrictPolicy"),
    f"{_OPS}.dynamic_embedding_creator": ("KVCreator", "CuckooHashTableConfig", "CuckooHashTableCreator"),
}


def _ragged_as_sparse(ids):
    return ids.to_sparse() if isinstance(ids, tf.RaggedTensor) else ids


def ragged_embedding_lookup_sparse(
    params, sp_ids, sp_weights, partition_strategy=None, name=None, combiner=None, max_norm=None, return_trainable=False
):
    """TFRA's ragged-or-sparse ``embedding_lookup_sparse``: a RaggedTensor is read as the SparseTensor it holds."""
    return lookups.embedding_lookup_sparse(
        params,
        _ragged_as_sparse(sp_ids),
        None if sp_weights is None else _ragged_as_sparse(sp_weights),
        partition_strategy=partition_strategy,
        name=name or "embedding_lookup_sparse",
        combiner=combiner or "mean",
        max_norm=max_norm,
        return_trainable=return_trainable,
    )


def ragged_safe_embedding_lookup_sparse(
    embedding_weights,
    sparse_ids,
    sparse_weights=None,
    combiner="mean",
    default_id=None,
    name=None,
    partition_strategy=None,
    max_norm=None,
    return_trainable=False,
):
    """TFRA's ragged-or-sparse ``safe_embedding_lookup_sparse``."""
    return lookups.safe_embedding_lookup_sparse(
        embedding_weights,
        _ragged_as_sparse(sparse_ids),
        None if sparse_weights is None else _ragged_as_sparse(sparse_weights),
        combiner=combiner,
        default_id=default_id,
        name=name or "safe_embedding_lookup_sparse",
        partition_strategy=partition_strategy,
        max_norm=max_norm,
        return_trainable=return_trainable,
    )


def _check_platform() -> dict:
    """TFRA's ``utils.check_platform``: the platform tests its tests skip on."""
    machine = platform.machine()
    return {
        "is_macos": lambda: sys.platform == "darwin",
        "is_windows": lambda: sys.platform.startswith("win"),
        "is_linux": lambda: sys.platform.startswith("linux"),
        "is_arm64": lambda: machine in ("arm64", "aarch64"),
        "is_raspi_arm": lambda: machine.startswith("armv7"),
    }


def members_by_module(public: dict) -> dict[str, dict]:
    """{module name below the package: its members}, from ``public`` (the ``dynamic_embedding`` members)."""
    modules = {name: {key: public[key] for key in keys} for name, keys in _FROM_PUBLIC.items()}
    modules[f"{_OPS}.ragged_embedding_ops"] = {
        "embedding_lookup_sparse": ragged_embedding_lookup_sparse,
        "safe_embedding_lookup_sparse": ragged_safe_embedding_lookup_sparse,
    }
    modules["utils"] = {}
    modules["utils.check_platform"] = _check_platform()
    for name, members in modules.items():
        members.setdefault("__doc__", f"TFRA's {name} module, as the ps_toolkit compat layer serves it.")
    return modules
