"""A model checked before its task's server starts: every function of the contract called once, in a scratch graph.

A missing loss, a dataset of the wrong structure, a model_fn that raises:
each is reported as one line while nobody waits for this task yet, instead
of after the cluster has come up.
"""

from __future__ import annotations

import tensorflow as tf

from ps_toolkit.cluster.config import EVALUATOR, ClusterConfig
from ps_toolkit.training import export, input_pipeline
from ps_toolkit.training.config import TrainConfig
from ps_toolkit.training.evaluation import build_eval_graph
from ps_toolkit.training.model_api import ModeKeys, ModelDefinition, function_name
from ps_toolkit.training.model_calls import call_input_fn, call_model_fn


def check_definition(definition: ModelDefinition, cluster: ClusterConfig, config: TrainConfig) -> None:
    """Raises ConfigError naming the first part of ``definition`` that does not keep the contract."""
    if cluster.task_type == EVALUATOR:
        with tf.Graph().as_default():
            build_eval_graph(definition)
        return
    context = input_pipeline.input_context(cluster, config)
    with tf.Graph().as_default():
        dataset = call_input_fn(definition.input_fn, function_name(definition.input_fn), context, definition.params)
        features, labels = tf.compat.v1.data.make_initializable_iterator(dataset).get_next()
        call_model_fn(definition, features, labels, ModeKeys.TRAIN)  # checks the spec
        if definition.eval_input_fn is not None:
            build_eval_graph(definition, reuse=tf.compat.v1.AUTO_REUSE)
    if cluster.is_chief and config.export_dir:
        with tf.Graph().as_default():
            export.predict_spec(definition, context)
