"""What to train and how, validated against the cluster before TensorFlow is imported."""

from __future__ import annotations

import dataclasses
import math

from ps_toolkit.base import flag_ranges
from ps_toolkit.base.errors import ConfigError
from ps_toolkit.cluster.config import ClusterConfig
from ps_toolkit.placement import registry as placement_registry
from ps_toolkit.placement.choices import NEAR_WEIGHTS_MODES
from ps_toolkit.training import optimizers, user_code

# sparse_lookup.WIRE_DTYPES, without importing TensorFlow here.
WIRE_DTYPES = ("float32", "bfloat16")
FINAL_EVALUATIONS = ("every_replica", "chief")  # TrainConfig.final_evaluation
# The last step of a job with no step limit (train_steps=0): far beyond reach, with int64 headroom.
UNLIMITED_LAST_STEP = flag_ranges.INT64_MAX // 2
# What intervals counted in steps (progress lines, table maintenance) assume a job with no limit takes.
UNLIMITED_INTERVAL_STEPS = 10_000


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """What to train and how; each field is the ``run_task.py`` flag of the same name.

    A frozen dataclass: make one with the fields to change, e.g.
    ``TrainConfig(train_steps=1000, optimizer="adagrad", checkpoint_dir="/shared/run1")``.
    ``validate`` checks it against a cluster; the flags' meanings are in
    docs/tasks.md ("Training flags") and docs/model_fn.md.
    """

    model: str = "softmax"  # the built-in model the CLI trains when no --model_fn is given
    data_dir: str | None = None  # the built-in models' MNIST folder; None: the embedded digits
    train_steps: int = 1000  # 0: no limit, train until a stop request (SIGTERM / Ctrl-C, stop_request)
    batch_size: int = 100
    optimizer: str = "sgd"  # ps_toolkit.training.optimizers
    learning_rate: float | None = None  # None: the model's default for the optimizer, else the optimizer's
    export_dir: str | None = None  # where the chief writes a SavedModel of the PREDICT graph at the end
    eval_steps: int | None = None  # batches per evaluation; None: the whole eval dataset
    # Which replicas evaluate the final model (FINAL_EVALUATIONS): every one, as the textbooks' workers
    # each print their test accuracy, or the chief alone, as tf.estimator's workers leave it to others:
    # the model is the same, and a large model's evaluation on every replica is the job's longest end.
    final_evaluation: str = "every_replica"
    sync_replicas: bool = False
    replicas_to_aggregate: int | None = None  # None: every replica
    checkpoint_dir: str | None = None
    save_checkpoint_steps: int | None = 100
    save_checkpoint_secs: float | None = None
    # Delta checkpoints of the dynamic tables between whole ones (docs/online.md); None: none.
    delta_checkpoint_secs: float | None = None
    delta_checkpoint_steps: int | None = None
    save_summaries_steps: int = 100
    placement: str = "round_robin"
    partition_variables: bool = False  # split large variables across the ps tasks
    seed: int = 0
    readiness_poll_secs: float = 0.2
    # No global-step progress for this long (session creation included) ends
    # the task with the retryable status. 0 turns the watchdog off.
    watchdog_secs: float = 0.0
    progress_every_secs: float = 1.0
    # MonitoredSession waits this long for its threads at close. TensorFlow's
    # 120 s default is what makes a sync chief hang at exit.
    stop_grace_secs: float = 0.25
    # Steps per session.run, in an in-graph loop (ps_toolkit.training.multi_step, async;
    # ps_toolkit.training.multi_step, sync): the per-run overhead (Python, hooks, RunStep, a
    # RunGraph RPC per ps) is paid once. run_task.py's default is 20; the library's
    # is 1, what a MonitoredSession user (and train_and_evaluate) expects.
    steps_per_run: int = 1
    # Which fully connected layers run on the ps that holds their weights
    # (layer_placement.py: auto, all, none): activations cross the network
    # instead of weights and gradients. The library's default stays "none", what
    # a MonitoredSession user expects; run_task.py's is "auto".
    compute_near_weights: str = "none"
    # Small parameters and their gradients move as one tensor per ps each way
    # per step (packed_transfer.py): fewer RPCs, the same arithmetic.
    pack_transfers: bool = True
    # How ps_toolkit.embedding_lookups moves rows (sparse_lookup.py): each distinct id
    # once per step, all the tables' rows in one transfer per ps each way, and
    # (opt-in) bfloat16 rows and gradients on the wire, float32 on the ps.
    unique_ids: bool = True
    group_lookups: bool = True
    wire_dtype: str = "float32"

    @property
    def last_step(self) -> int:
        """The global step training stops at: ``train_steps``, or one never reached when it is 0."""
        return self.train_steps or UNLIMITED_LAST_STEP

    @property
    def interval_steps(self) -> int:
        """The run length that step-counted intervals divide: ``train_steps``, or a nominal one when 0."""
        return self.train_steps or UNLIMITED_INTERVAL_STEPS

    @property
    def packed_transfers(self) -> bool:
        """Whether steps move parameters and gradients packed: not when every layer runs on the ps anyway."""
        return self.pack_transfers and self.compute_near_weights != "all"

    def learning_rate_for(self, default_learning_rates) -> float:
        """The learning rate: the one given, else the model's default for the optimizer, else the optimizer's.

        Args:
            default_learning_rates: Optimizer name -> the model's own learning rate.

        Returns:
            The learning rate to train with.
        """
        if self.learning_rate is not None:
            return self.learning_rate
        return default_learning_rates.get(self.optimizer, optimizers.DEFAULT_LEARNING_RATES[self.optimizer])

    @property
    def deltas(self) -> bool:
        """Whether the chief writes delta checkpoints."""
        return bool(self.delta_checkpoint_secs or self.delta_checkpoint_steps)

    def aggregate_count(self, cluster: ClusterConfig) -> int:
        """The gradients a sync step averages: ``replicas_to_aggregate``, else every replica of ``cluster``."""
        return self.replicas_to_aggregate or cluster.num_replicas

    def _check_ranges(self, cluster: ClusterConfig) -> None:
        """Integers inside int64 (the global step's type), intervals finite and not negative."""
        for name in (
            "batch_size",
            "save_summaries_steps",
            "steps_per_run",
            "eval_steps",
            "save_checkpoint_steps",
            "delta_checkpoint_steps",
        ):
            flag_ranges.check_int(name, getattr(self, name))
        flag_ranges.check_int("seed", self.seed, low=0)
        # The last run of every replica may pass train_steps: the global step must still fit in int64.
        headroom = cluster.num_replicas * self.steps_per_run
        flag_ranges.check_int(
            "train_steps",
            self.train_steps,
            low=0,
            high=flag_ranges.INT64_MAX - headroom,
            why="the global step is an int64",
        )
        if self.learning_rate is not None and not math.isfinite(self.learning_rate):
            raise ConfigError(f"--learning_rate={self.learning_rate} is not a finite number")
        flag_ranges.check_seconds("save_checkpoint_secs", self.save_checkpoint_secs)
        flag_ranges.check_seconds("delta_checkpoint_secs", self.delta_checkpoint_secs)
        flag_ranges.check_seconds("readiness_poll_secs", self.readiness_poll_secs, none_ok=False)
        flag_ranges.check_seconds("watchdog_secs", self.watchdog_secs, zero_ok=True, none_ok=False)
        flag_ranges.check_seconds("progress_every_secs", self.progress_every_secs, none_ok=False)
        flag_ranges.check_seconds("stop_grace_secs", self.stop_grace_secs, zero_ok=True, none_ok=False)

    def validate(self, cluster: ClusterConfig) -> None:
        """Checks every setting, alone and against ``cluster``.

        Args:
            cluster: The cluster this task trains in.

        Raises:
            ConfigError: naming the first bad or contradictory setting.
        """
        optimizers.check_name(self.optimizer)
        if self.train_steps < 0:
            raise ConfigError(f"--train_steps={self.train_steps} must be positive, or 0 to train until stopped")
        if self.train_steps == 0 and self.sync_replicas:
            raise ConfigError("--train_steps=0 (train until stopped) works with asynchronous training only")
        for name in ("batch_size", "save_summaries_steps", "steps_per_run"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"--{name}={getattr(self, name)} must be positive")
        if self.learning_rate is not None and not self.learning_rate > 0:
            raise ConfigError(f"--learning_rate={self.learning_rate} must be positive")
        if self.final_evaluation not in FINAL_EVALUATIONS:
            valid = ", ".join(FINAL_EVALUATIONS)
            raise ConfigError(f"unknown --final_evaluation={self.final_evaluation!r}; valid: {valid}")
        if self.eval_steps is not None and self.eval_steps <= 0:
            raise ConfigError(f"--eval_steps={self.eval_steps} must be positive")
        if self.save_checkpoint_steps is not None and self.save_checkpoint_steps <= 0:
            raise ConfigError(f"--save_checkpoint_steps={self.save_checkpoint_steps} must be positive")
        if self.delta_checkpoint_steps is not None and self.delta_checkpoint_steps <= 0:
            raise ConfigError(f"--delta_checkpoint_steps={self.delta_checkpoint_steps} must be positive")
        if self.deltas and not self.checkpoint_dir:
            raise ConfigError("--delta_checkpoint_secs/--delta_checkpoint_steps need a --checkpoint_dir")
        if self.replicas_to_aggregate is not None:
            if not self.sync_replicas:
                raise ConfigError(f"--replicas_to_aggregate={self.replicas_to_aggregate} needs --sync_replicas")
            if not 1 <= self.replicas_to_aggregate <= cluster.num_replicas:
                raise ConfigError(
                    f"--replicas_to_aggregate={self.replicas_to_aggregate} must be between 1 and "
                    f"the number of training replicas, {cluster.num_replicas}"
                )
        self._check_ranges(cluster)
        if self.compute_near_weights not in NEAR_WEIGHTS_MODES:
            raise ConfigError(
                f"unknown mode {self.compute_near_weights!r} (from --compute_near_weights); "
                f"valid: {', '.join(NEAR_WEIGHTS_MODES)}"
            )
        if self.compute_near_weights == "all" and self.partition_variables:
            raise ConfigError(
                "--compute_near_weights=all runs each layer where its whole weight matrix lives; "
                "it does not combine with --partition_variables"
            )
        if self.wire_dtype not in WIRE_DTYPES:
            raise ConfigError(f"unknown --wire_dtype={self.wire_dtype!r}; valid: {', '.join(WIRE_DTYPES)}")
        if ":" in self.placement:  # a user's strategy function, imported by the task that builds the graph
            user_code.locate(self.placement, "placement")
        else:
            placement_registry.STRATEGIES.check(self.placement)
        if cluster.num_replicas + cluster.num_ps > 1 and not self.checkpoint_dir:
            raise ConfigError(
                "multi-task training needs --checkpoint_dir: without one, a ps or chief "
                "restart silently resets training to step 0"
            )
