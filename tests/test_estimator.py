"""ps_toolkit.estimator: specs map onto TrainConfig, bad input is one clear error (no servers)."""

import pytest

from ps_toolkit.errors import ConfigError
from ps_toolkit.estimator import EvalSpec, RunConfig, TrainSpec, train_and_evaluate, train_config


def test_specs_map_onto_the_toolkit_train_config():
    config = train_config(
        RunConfig(model_dir="/m", save_checkpoints_steps=200, save_summary_steps=50),
        TrainSpec(max_steps=1000, model="mlp", sync_replicas=True),
    )
    assert (config.checkpoint_dir, config.train_steps, config.model) == ("/m", 1000, "mlp")
    assert (config.save_checkpoint_steps, config.save_checkpoint_secs, config.save_summaries_steps) == (200, None, 50)
    assert config.sync_replicas


def test_checkpoint_seconds_win_over_steps_as_in_tf_estimator():
    config = train_config(RunConfig(model_dir="/m", save_checkpoints_secs=30), TrainSpec(max_steps=10))
    assert (config.save_checkpoint_steps, config.save_checkpoint_secs) == (None, 30)


def test_without_tf_config_the_error_says_how_to_run_it(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ConfigError, match=r"needs TF_CONFIG.*launch_local.py --chief --evaluator"):
        train_and_evaluate(RunConfig(model_dir="/m"), TrainSpec(max_steps=10), EvalSpec())


@pytest.mark.parametrize(
    ("spec", "message"),
    [(EvalSpec(steps=0), "steps=0 must be positive"), (EvalSpec(throttle_secs=-1), "throttle_secs=-1 is negative")],
)
def test_bad_eval_spec_is_named(spec, message):
    with pytest.raises(ConfigError, match=message):
        spec.validate()


def test_empty_model_dir_is_named():
    with pytest.raises(ConfigError, match="model_dir is empty"):
        train_config(RunConfig(model_dir=""), TrainSpec(max_steps=10))
