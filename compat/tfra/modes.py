"""TFRA's model mode: ``train`` (lookups feed the optimizer) or ``inference`` (lookups only read)."""

from __future__ import annotations


class ModelMode:
    """The process-wide mode, read when a lookup is built (set it before building the graph, as in TFRA)."""

    TRAIN = "train"
    INFERENCE = "inference"
    CURRENT_SETTING = TRAIN


def get_model_mode() -> str:
    return ModelMode.CURRENT_SETTING


def enable_train_mode() -> None:
    ModelMode.CURRENT_SETTING = ModelMode.TRAIN


def enable_inference_mode() -> None:
    """Lookups built from now on read the tables and never insert: for export and serving graphs."""
    ModelMode.CURRENT_SETTING = ModelMode.INFERENCE


def inference() -> bool:
    return ModelMode.CURRENT_SETTING == ModelMode.INFERENCE
