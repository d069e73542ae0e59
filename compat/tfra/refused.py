"""The TFRA names the compat layer does not serve, each with the one line that says why and what to use."""

from __future__ import annotations

from ps_toolkit.base.errors import ConfigError

_GPU = "GPU-only in TFRA (HierarchicalKV tables); here tables are TensorFlow's own hash tables on the ps CPUs"
_REDIS = "an external Redis store; here tables live in the ps tasks' memory and in the checkpoints"
EAGER = (
    "TFRA's eager / tf.function / tf.distribute path; the compat layer serves the TF1 graph-mode surface "
    "(get_variable + embedding_lookup in a graph, a tf.compat.v1.train optimizer)"
)
_KERAS = (
    "TFRA's Keras layers (Keras 3 broke them upstream, recommenders-addons#487); use get_variable + "
    "embedding_lookup in a graph-mode model_fn"
)
FILES = "TFRA's file-system saver; the tables are saved and restored with the checkpoints (tf.train.Saver)"

# Dotted names below ``tensorflow_recommenders_addons`` -> why they are not served. A key
# also covers everything under it (``dynamic_embedding.keras`` covers its layers).
NOT_SERVED = {
    "embedding_variable": "TFRA's EmbeddingVariable (a separate C++ op library); use dynamic_embedding",
    "dynamic_embedding.HkvHashTable": _GPU,
    "dynamic_embedding.HkvHashTableConfig": _GPU,
    "dynamic_embedding.HkvHashTableCreator": _GPU,
    "dynamic_embedding.HkvEvictStrategy": _GPU,
    "dynamic_embedding.RedisTable": _REDIS,
    "dynamic_embedding.RedisTableConfig": _REDIS,
    "dynamic_embedding.RedisTableCreator": _REDIS,
    "dynamic_embedding.CuckooHashTable": "TFRA's C++ table op; use dynamic_embedding.get_variable",
    "dynamic_embedding.FileSystemSaver": FILES,
    "dynamic_embedding.keras": _KERAS,
    "dynamic_embedding.shadow_ops": EAGER,
    "dynamic_embedding.DEResourceVariable": EAGER,
    "dynamic_embedding.DistributedVariableWrapper": EAGER,
    "dynamic_embedding.train": "TFRA's Horovod and Keras checkpoint helpers; use tf.train.Saver or the estimator",
    "dynamic_embedding.math": "TFRA's custom math kernels; use tf.math and tf.sparse",
    "dynamic_embedding.data_flow": "TFRA's custom partition/stitch kernels; use tf.dynamic_partition/dynamic_stitch",
    "dynamic_embedding.ragged_embedding_ops": "TFRA's ragged lookups; use embedding_lookup_sparse",
    "dynamic_embedding.warm_start": "TFRA's table warm start; restore the tables from a checkpoint",
    "dynamic_embedding.WarmStartHook": "TFRA's table warm start; restore the tables from a checkpoint",
    "dynamic_embedding.create_slots": "TFRA's internal slot builder; the optimizer wrapper makes the slots",
    "dynamic_embedding.patch_on_tf": "TFRA's patches of TensorFlow internals; nothing needs patching here",
    "dynamic_embedding.patch_on_tf_save_restore": "TFRA's patches of TensorFlow internals; nothing needs patching",
    "dynamic_embedding.python": "a TFRA private module or name the compat layer does not serve (see docs/tfra.md)",
    "dynamic_embedding.python.keras": _KERAS,
    "dynamic_embedding.python.train": "TFRA's Horovod and Keras checkpoint helpers; use tf.train.Saver",
}
DEFAULT_REASON = "not part of the TFRA surface the compat layer serves (see docs/tfra.md)"
_PRIVATE_OPS = "dynamic_embedding.python.ops."


def reason_for(name: str) -> str:
    """Why ``name`` (dotted, below the package) is not served: its entry or its closest parent's."""
    parts = name.split(".")
    if name.startswith(_PRIVATE_OPS) and len(parts) > 4:  # a refused public name where TFRA defined it
        found = NOT_SERVED.get(f"dynamic_embedding.{parts[-1]}")
        if found:
            return found
    for end in range(len(parts), 0, -1):
        found = NOT_SERVED.get(".".join(parts[:end]))
        if found:
            return found
    return DEFAULT_REASON


def message(name: str) -> str:
    return f"tensorflow_recommenders_addons.{name} is not served by the ps_toolkit compat layer: {reason_for(name)}"


class NotServedError(ConfigError, AttributeError):
    """A TFRA attribute the compat layer does not serve; an AttributeError, so ``hasattr`` answers False."""

    def __init__(self, name: str):
        super().__init__(message(name))
        self.symbol = name


class NotServedModuleError(ConfigError, ImportError):
    """``import tensorflow_recommenders_addons.<module>`` of a module not served (not ModuleNotFoundError,
    which ``from x import y`` would swallow)."""

    def __init__(self, name: str):
        super().__init__(message(name))
        self.symbol = name


class NotServedUseError(ConfigError, NotImplementedError):
    """A served TFRA call with an argument or in a context the compat layer does not serve."""
