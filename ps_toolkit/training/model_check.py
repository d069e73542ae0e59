"""Parts of a model checked in a scratch graph before its task's server starts: evaluation and export.

Design: docs/design.md, "The training seam and the public API".
"""

from __future__ import annotations

import tensorflow as tf

from ps_toolkit.cluster.config import ClusterConfig
from ps_toolkit.training import export, input_pipeline
from ps_toolkit.training.config import TrainConfig
from ps_toolkit.training.evaluation import build_eval_graph
from ps_toolkit.training.model_api import ModelDefinition


def check_eval_definition(definition: ModelDefinition) -> None:
    """Raises ConfigError naming the first part of an evaluator's ``definition`` that does not keep the contract."""
    with tf.Graph().as_default():
        build_eval_graph(definition)


def check_export_definition(definition: ModelDefinition, cluster: ClusterConfig, config: TrainConfig) -> None:
    """Raises ConfigError when the model's PREDICT spec cannot be exported (checked before training, not after)."""
    with tf.Graph().as_default():
        export.predict_spec(definition, input_pipeline.input_context(cluster, config))
