"""The names ``tensorflow_recommenders_addons.dynamic_embedding`` serves, gathered from the adapter's modules."""

from __future__ import annotations

from ps_toolkit_compat.tfra import lookups, modes, optimizer, restrict, variable


class GraphKeys:
    """TFRA's (deprecated) collection names; TFRA itself no longer added its variables to them."""

    DYNAMIC_EMBEDDING_VARIABLES = "dynamic_embedding_variables"
    TRAINABLE_DYNAMIC_EMBEDDING_VARIABLES = "trainable_dynamic_embedding_variables"


def members() -> dict:
    return {
        "__doc__": "TFRA's graph-mode dynamic_embedding API over ps_toolkit's dynamic tables.",
        "Variable": variable.Variable,
        "get_variable": variable.get_variable,
        "KVCreator": variable.KVCreator,
        "CuckooHashTableCreator": variable.CuckooHashTableCreator,
        "CuckooHashTableConfig": variable.CuckooHashTableConfig,
        "GraphKeys": GraphKeys,
        "TrainableWrapper": lookups.TrainableWrapper,
        "embedding_lookup": lookups.embedding_lookup,
        "embedding_lookup_unique": lookups.embedding_lookup_unique,
        "embedding_lookup_sparse": lookups.embedding_lookup_sparse,
        "safe_embedding_lookup_sparse": lookups.safe_embedding_lookup_sparse,
        "trainable_wrapper_filter": lookups.trainable_wrapper_filter,
        "DynamicEmbeddingOptimizer": optimizer.DynamicEmbeddingOptimizer,
        "RestrictPolicy": restrict.RestrictPolicy,
        "TimestampRestrictPolicy": restrict.TimestampRestrictPolicy,
        "FrequencyRestrictPolicy": restrict.FrequencyRestrictPolicy,
        "ModelMode": modes.ModelMode,
        "enable_inference_mode": modes.enable_inference_mode,
        "enable_train_mode": modes.enable_train_mode,
        "get_model_mode": modes.get_model_mode,
    }
