"""``train_and_evaluate`` with RunConfig/TrainSpec/EvalSpec, as tf.estimator had, on the toolkit's training loop.

tf.estimator is gone from TensorFlow 2.21. This keeps its shape for the
between-graph case: every task of the cluster calls the same function, and
its TF_CONFIG role decides what it does. chief/worker: train
(``runner.run_server_task``); ps: serve until every replica is done; evaluator:
evaluate every new checkpoint (``evaluation.evaluate_checkpoints``) and write
eval summaries to ``<model_dir>/eval`` until the one at ``max_steps``.

Example (every task runs this, with its own TF_CONFIG):

    run_config = RunConfig(model_dir="/shared/mnist", save_checkpoints_steps=200, save_summary_steps=100)
    train_spec = TrainSpec(max_steps=2000, model="softmax")
    eval_spec = EvalSpec(steps=None, throttle_secs=5)
    train_and_evaluate(run_config, train_spec, eval_spec)
"""

from __future__ import annotations

import dataclasses
import os

from ps_toolkit import cluster as cluster_lib
from ps_toolkit.cluster import EVALUATOR
from ps_toolkit.errors import ConfigError
from ps_toolkit.train_config import TrainConfig


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Where and how often the chief writes (tf.estimator.RunConfig's checkpoint and summary settings)."""

    model_dir: str
    save_checkpoints_steps: int | None = 100
    save_checkpoints_secs: float | None = None
    save_summary_steps: int = 100


@dataclasses.dataclass(frozen=True)
class TrainSpec:
    """What to train and for how long. The input is the toolkit's per-replica shuffled MNIST pipeline."""

    max_steps: int
    model: str = "softmax"
    data_dir: str | None = None  # None: the embedded digits
    batch_size: int = 100
    learning_rate: float | None = None
    sync_replicas: bool = False
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class EvalSpec:
    """How the evaluator works: ``steps`` batches of ``batch_size`` (None: the whole test set), at most one
    evaluation per ``throttle_secs``, giving up after ``idle_timeout_secs`` without a new checkpoint."""

    steps: int | None = None
    throttle_secs: float = 600.0
    batch_size: int = 1000
    idle_timeout_secs: float = 600.0

    def validate(self) -> None:
        if self.steps is not None and self.steps <= 0:
            raise ConfigError(f"EvalSpec steps={self.steps} must be positive (or None for the whole test set)")
        for name in ("throttle_secs", "idle_timeout_secs"):
            if getattr(self, name) < 0:
                raise ConfigError(f"EvalSpec {name}={getattr(self, name)} is negative")
        if self.batch_size <= 0:
            raise ConfigError(f"EvalSpec batch_size={self.batch_size} must be positive")


def train_config(run_config: RunConfig, train_spec: TrainSpec) -> TrainConfig:
    """The toolkit TrainConfig these specs describe."""
    if not run_config.model_dir:
        raise ConfigError("RunConfig model_dir is empty; every task needs the shared model directory")
    return TrainConfig(
        model=train_spec.model,
        data_dir=train_spec.data_dir,
        train_steps=train_spec.max_steps,
        batch_size=train_spec.batch_size,
        learning_rate=train_spec.learning_rate,
        sync_replicas=train_spec.sync_replicas,
        checkpoint_dir=run_config.model_dir,
        # Seconds win over steps, as in tf.estimator (the two are exclusive there).
        save_checkpoint_steps=None if run_config.save_checkpoints_secs else run_config.save_checkpoints_steps,
        save_checkpoint_secs=run_config.save_checkpoints_secs,
        save_summaries_steps=run_config.save_summary_steps,
        seed=train_spec.seed,
    )


def train_and_evaluate(
    run_config: RunConfig,
    train_spec: TrainSpec,
    eval_spec: EvalSpec,
    *,
    tf_config: str | None = None,
    ps_orphan_timeout_secs: float = 300.0,
) -> dict:
    """Runs this task's role from TF_CONFIG (``tf_config`` or the environment) to its end; returns its result.

    Raises:
        ConfigError: no TF_CONFIG, or a setting that does not fit the cluster.
    """
    tf_config = tf_config if tf_config is not None else os.environ.get("TF_CONFIG", "")
    if not tf_config.strip():
        raise ConfigError(
            "train_and_evaluate needs TF_CONFIG naming the cluster and this task; on one machine run "
            "python scripts/launch_local.py --chief --evaluator -- python YOUR_SCRIPT.py"
        )
    cluster = cluster_lib.resolve(tf_config=tf_config)
    config = train_config(run_config, train_spec)
    config.validate(cluster)
    eval_spec.validate()
    from ps_toolkit import runner  # TensorFlow only once the input is known to be good

    if cluster.task_type == EVALUATOR:
        return _evaluate(cluster, config, eval_spec)
    return runner.run_server_task(cluster, config, ps_orphan_timeout_secs=ps_orphan_timeout_secs)


def _evaluate(cluster, config: TrainConfig, eval_spec: EvalSpec) -> dict:
    from ps_toolkit import evaluation
    from ps_toolkit.data import load_dataset
    from ps_toolkit.hooks import print_result

    data = load_dataset(config.data_dir)
    if eval_spec.steps is not None:
        count = eval_spec.steps * eval_spec.batch_size
        data = dataclasses.replace(data, test_images=data.test_images[:count], test_labels=data.test_labels[:count])
    result = evaluation.evaluate_checkpoints(
        cluster,
        config,
        data,
        throttle_secs=eval_spec.throttle_secs,
        idle_timeout_secs=eval_spec.idle_timeout_secs,
        eval_batch_size=eval_spec.batch_size,
    )
    print_result(result)
    return result
