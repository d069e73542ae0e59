"""The final evaluation: a graph of its own, built after the first run, over the variables training placed."""

import dataclasses

import pytest
import tensorflow as tf

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.launch.local_cluster import InProcessCluster
from ps_toolkit.models import classifiers
from ps_toolkit.task import monitored_training
from ps_toolkit.training.config import TrainConfig
from ps_toolkit.training.model_api import ModeKeys, ModelSpec

SOFTMAX = classifiers.definition("softmax")


def _with_eval_only_variable(features, labels, mode, params):
    """The built-in classifier; its EVAL mode also makes a variable training never sees, and reports it."""
    spec = classifiers.classifier_model_fn(features, labels, mode, params)
    if mode != ModeKeys.EVAL:
        return spec
    eval_only = tf.compat.v1.get_variable("eval_only", initializer=3.0, trainable=False)
    metrics = {**spec.eval_metric_ops, "eval_only": tf.compat.v1.metrics.mean(eval_only)}
    return dataclasses.replace(spec, eval_metric_ops=metrics)


def _without_eval_loss(features, labels, mode, params):
    spec = classifiers.classifier_model_fn(features, labels, mode, params)
    return ModelSpec(mode, predictions=spec.predictions) if mode == ModeKeys.EVAL else spec


def _train(definition, tmp_path, num_ps, steps_seen=None, **config):
    config = TrainConfig(checkpoint_dir=str(tmp_path), batch_size=32, **config)
    with InProcessCluster(num_ps=num_ps, num_workers=1) as cluster:
        return monitored_training.train(
            cluster.cluster_config("worker", 0),
            cluster.targets["worker"][0],
            config,
            definition,
            on_progress=steps_seen.append if steps_seen is not None else None,
        )


def test_the_evaluation_reads_the_trained_variables_where_training_placed_them(tmp_path):
    """Two ps: each variable is on one of them; read anywhere else it would be uninitialized (or untrained)."""
    definition = dataclasses.replace(SOFTMAX, model_fn=_with_eval_only_variable)
    result = _train(definition, tmp_path, num_ps=2, train_steps=60, steps_per_run=20)
    assert result["global_step"] == 60, result
    # Untrained weights score about 0.1 on ten digits.
    assert result["eval"]["accuracy"] > 0.5, result
    assert result["eval"]["eval_only"] == pytest.approx(3.0), result


def test_an_eval_mode_that_breaks_the_contract_ends_the_task_after_its_first_run(tmp_path):
    definition = dataclasses.replace(SOFTMAX, model_fn=_without_eval_loss)
    steps_seen = []
    with pytest.raises(ConfigError, match="returned no loss in EVAL mode"):
        _train(definition, tmp_path, num_ps=1, steps_seen=steps_seen, train_steps=10**6, steps_per_run=20)
    assert steps_seen == [1], steps_seen


def test_an_endless_eval_dataset_is_evaluated_for_eval_steps_batches(tmp_path):
    def repeated(params=None):
        return SOFTMAX.eval_input_fn().repeat()

    definition = dataclasses.replace(SOFTMAX, eval_input_fn=repeated)
    result = _train(definition, tmp_path, num_ps=1, train_steps=40, steps_per_run=20, eval_steps=3)
    assert result["eval"]["accuracy"] > 0.5, result
