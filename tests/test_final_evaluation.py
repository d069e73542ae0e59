"""The final evaluation: a graph of its own, built after the first run, over the variables training placed."""

import dataclasses
import threading

import pytest
import tensorflow as tf

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.cluster.config import ClusterConfig
from ps_toolkit.launch.local_cluster import InProcessCluster
from ps_toolkit.models import classifiers
from ps_toolkit.task.roles import trainer
from ps_toolkit.training import evaluation, model_calls
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


def _counting_in_every_mode(features, labels, mode, params):
    """A metric built in every mode, as TensorFlow's custom-estimator guide does: ``seen`` counts examples."""
    spec = classifiers.classifier_model_fn(features, labels, mode, params)
    everything = tf.ones_like(labels, dtype=tf.bool)
    seen = tf.compat.v1.metrics.true_positives(everything, everything, name="seen")
    if mode != ModeKeys.EVAL:
        return spec
    return dataclasses.replace(spec, eval_metric_ops={**spec.eval_metric_ops, "seen": seen})


class _LocalVariableHook(tf.compat.v1.train.SessionRunHook):
    """Makes a local variable in begin(), which TensorFlow allows: the graph is not final yet."""

    def begin(self):
        runs = tf.compat.v1.get_local_variable("hook_runs", initializer=tf.constant(0, tf.int64))
        self._count = runs.assign_add(1)

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(self._count)


def _with_local_variable_hook(features, labels, mode, params):
    spec = classifiers.classifier_model_fn(features, labels, mode, params)
    return dataclasses.replace(spec, training_hooks=[_LocalVariableHook()]) if mode == ModeKeys.TRAIN else spec


def _train(definition, tmp_path, num_ps, steps_seen=None, **config):
    config = TrainConfig(checkpoint_dir=str(tmp_path), batch_size=32, **config)
    with InProcessCluster(num_ps=num_ps, num_workers=1) as cluster:
        return trainer.train(
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


def test_each_replica_counts_its_own_evaluation_when_train_mode_made_the_same_metric(tmp_path):
    """The TRAIN call's metric variables sit on a ps (the device setter places by op type); the
    evaluations of two replicas, at the same time, must not count into them together."""
    passes = 5
    definition = dataclasses.replace(SOFTMAX, model_fn=_counting_in_every_mode, eval_input_fn=_repeated(passes))
    examples = passes * _eval_examples()
    config = TrainConfig(
        checkpoint_dir=str(tmp_path), batch_size=32, train_steps=30, steps_per_run=1, sync_replicas=True
    )
    results = _train_two_replicas(definition, config)
    for index in range(2):
        assert results[index]["eval"]["seen"] == examples, results


def test_only_the_chief_evaluates_the_final_model_when_told(tmp_path):
    # Two async replicas at the textbook's 0.5 swing between losses of 0.3 and 3 on stale gradients:
    # a lower rate makes "the chief evaluated the trained model" a safe margin over chance (0.1).
    config = TrainConfig(
        checkpoint_dir=str(tmp_path), batch_size=32, train_steps=40, learning_rate=0.1, final_evaluation="chief"
    )
    results = _train_two_replicas(SOFTMAX, config)
    assert results[0]["eval"]["accuracy"] > 0.5 and results[0]["test_accuracy"] > 0.5, results
    assert results[1]["eval"] is None and results[1]["test_accuracy"] is None, results
    assert results[1]["global_step"] >= 40, results


def test_an_unknown_final_evaluation_is_refused_naming_it():
    cluster = ClusterConfig.from_host_flags(ps_hosts=None, worker_hosts="localhost:2", job_name="worker", task_index=0)
    with pytest.raises(ConfigError, match=r"--final_evaluation='workers'; valid: every_replica, chief"):
        TrainConfig(final_evaluation="workers").validate(cluster)


def _train_two_replicas(definition, config, num_ps=2) -> dict:
    """Both workers' results, each replica trained on a thread of its own."""
    results = {}
    with InProcessCluster(num_ps=num_ps, num_workers=2) as cluster:

        def train(index):
            try:
                results[index] = trainer.train(
                    cluster.cluster_config("worker", index), cluster.targets["worker"][index], config, definition
                )
            except Exception as err:  # reported below, with the other replica's result
                results[index] = err

        replicas = [threading.Thread(target=train, args=(index,)) for index in range(2)]
        for replica in replicas:
            replica.start()
        for replica in replicas:
            replica.join(240)
        assert not any(replica.is_alive() for replica in replicas), results
    assert all(isinstance(results[index], dict) for index in range(2)), results
    return results


def test_a_local_variable_a_training_hook_makes_in_begin_is_initialized(tmp_path):
    definition = dataclasses.replace(SOFTMAX, model_fn=_with_local_variable_hook)
    result = _train(definition, tmp_path, num_ps=1, train_steps=20, steps_per_run=20)
    assert result["global_step"] == 20, result


class _StaleSession:
    """A warmed session whose handles a restarted ps no longer knows: every run is aborted."""

    def __init__(self):
        self.closed = False

    def run(self, *args, **kwargs):
        raise tf.errors.AbortedError(None, None, "Session handle is not found. Possibly this worker just restarted.")

    def close(self):
        self.closed = True


def test_a_warmed_session_a_ps_restart_aborted_is_replaced_by_a_new_one(tmp_path, monkeypatch):
    stale = _StaleSession()
    take = evaluation._WarmSession.take

    def take_stale(self, bound_secs):
        # The warm-up ended (its session is then closed, as a restarted ps would leave it useless);
        # one still running beside the new session would count into, or reset, its metrics.
        warmed = take(self, bound_secs)
        if warmed is not None:
            warmed.close()
        return stale

    monkeypatch.setattr(evaluation._WarmSession, "take", take_stale)
    result = _train(SOFTMAX, tmp_path, num_ps=1, train_steps=40, steps_per_run=20)
    assert stale.closed
    assert result["eval"]["accuracy"] > 0.5, result


class _RecordingSession:
    """Passes every run to ``session`` and keeps what each one fetched."""

    def __init__(self, session, fetched: list):
        self._session, self._fetched = session, fetched

    def run(self, fetches, *args, **kwargs):
        self._fetched.append(fetches)
        return self._session.run(fetches, *args, **kwargs)

    def close(self):
        self._session.close()


def _recording_the_end(monkeypatch) -> tuple[list, list]:
    """(EvalGraphs built, what the end fetched from the warmed session); fails the test if none was warmed."""
    built, fetched_at_end = [], []
    build = evaluation.build_eval_graph
    monkeypatch.setattr(evaluation, "build_eval_graph", lambda *a, **k: built.append(build(*a, **k)) or built[-1])
    take = evaluation._WarmSession.take

    def take_recording(self, bound_secs):
        warmed = take(self, bound_secs)
        assert warmed is not None, "the warm-up did not run"
        return _RecordingSession(warmed, fetched_at_end)

    monkeypatch.setattr(evaluation._WarmSession, "take", take_recording)
    return built, fetched_at_end


def _repeated(times: int):
    def eval_input_fn(params=None):
        return SOFTMAX.eval_input_fn().repeat(times)

    return eval_input_fn


def _eval_examples() -> int:
    return sum(int(labels.shape[0]) for _, labels in SOFTMAX.eval_input_fn())


def test_a_warmed_session_starts_its_data_and_metrics_again_before_the_end(tmp_path, monkeypatch):
    """The end runs no initializer in a warmed session (that run once stalled seconds there), and counts
    its eval_steps batches from the data's start: the warm-up's batch was undone during training."""
    built, fetched_at_end = _recording_the_end(monkeypatch)
    definition = dataclasses.replace(SOFTMAX, model_fn=_counting_in_every_mode, eval_input_fn=_repeated(3))
    result = _train(definition, tmp_path, num_ps=1, train_steps=60, steps_per_run=20, eval_steps=2)
    assert built and fetched_at_end
    assert not [fetch for fetch in fetched_at_end if fetch is built[-1].initializer], fetched_at_end
    # Three passes of the eval set, two of them counted: a warm-up batch left counted would make it three.
    assert result["eval"]["seen"] == 2 * _eval_examples(), result


class _CountingSeenHook(tf.compat.v1.train.SessionRunHook):
    """Makes, in begin(), the EVAL mode's ``seen`` metric under the model's scope, on no device (so on the
    replica's own task), and counts 7 into it every step: a training-side variable of the metric's name."""

    def begin(self):
        with tf.compat.v1.name_scope(f"{model_calls.MODEL_SCOPE}/"):  # the scope itself, not a new one
            everything = tf.ones([7], tf.bool)
            _, self._update = tf.compat.v1.metrics.true_positives(everything, everything, name="seen")

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(self._update)


def _seen_in_eval_only(features, labels, mode, params):
    spec = classifiers.classifier_model_fn(features, labels, mode, params)
    if mode == ModeKeys.TRAIN:
        return dataclasses.replace(spec, training_hooks=[_CountingSeenHook()])
    everything = tf.ones_like(labels, dtype=tf.bool)
    seen = tf.compat.v1.metrics.true_positives(everything, everything, name="seen")
    return dataclasses.replace(spec, eval_metric_ops={**spec.eval_metric_ops, "seen": seen})


def test_metrics_training_also_updates_on_this_task_are_reset_when_the_evaluation_starts(tmp_path, monkeypatch):
    """A training variable of a metric's name on the replica's own task is that metric's variable: training
    counts into it after the warm-up, so the end resets the metrics itself."""
    built, fetched_at_end = _recording_the_end(monkeypatch)
    definition = dataclasses.replace(SOFTMAX, model_fn=_seen_in_eval_only)
    result = _train(definition, tmp_path, num_ps=1, train_steps=60, steps_per_run=20)
    assert [fetch for fetch in fetched_at_end if fetch is built[-1].initializer], fetched_at_end
    assert result["eval"]["seen"] == _eval_examples(), result
