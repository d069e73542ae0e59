"""The benchmarked systems: how each one's tasks are started for one configuration."""

from __future__ import annotations

import dataclasses
import json

from benchmarks import checkpoint_sizes
from benchmarks.cluster_run import Task
from benchmarks.synthetic import EMBEDDING, MODELS
from benchmarks.tfra_systems import TFRA_SYSTEMS, TFRA_TF2_15, TOOLKIT_TFRA

TOOLKIT, TOOLKIT_1STEP, TOOLKIT_NEAR = "ps_toolkit", "ps_toolkit_1step", "ps_toolkit_near"
RAW, TF2, SINGLE = "raw_tf1", "tf2_pss", "single_process"
# ps_toolkit with the ctr model's tables as ps_toolkit.dynamic_embedding tables (ctr only).
TOOLKIT_DYNAMIC = "ps_toolkit_dynamic"
# One TFRA-API script of the ctr model, on real TFRA (TF 2.15.1) and on ps_toolkit's compat layer (ctr only).
SYSTEMS = (TOOLKIT, TOOLKIT_NEAR, TOOLKIT_1STEP, RAW, TF2, SINGLE, TOOLKIT_DYNAMIC, TOOLKIT_TFRA, TFRA_TF2_15)
# The systems run as modules of this package: python -m benchmarks.<system>.
PACKAGE = "benchmarks"
ASYNC, SYNC = "async", "sync"
# Flags each ps_toolkit system adds to scripts/run_task.py's defaults. ps_toolkit
# is the shipped defaults; ps_toolkit_1step turns off the in-graph loop (one step
# per session.run), to show what that lever buys; ps_toolkit_near runs with
# --compute_near_weights=all (every layer runs on the ps holding its weights).
TOOLKIT_FLAGS = {
    TOOLKIT: (),
    TOOLKIT_1STEP: ("--steps_per_run=1",),
    TOOLKIT_NEAR: ("--compute_near_weights=all",),
    TOOLKIT_DYNAMIC: (),
}
CTR = "ctr"
# The systems whose ctr records hold checkpoint sizes (benchmarks.checkpoint_sizes): the whole one, and with
# dynamic tables a delta.
CTR_CHECKPOINT_SYSTEMS = (TOOLKIT, TOOLKIT_DYNAMIC)
CTR_LEARNING_RATE = 0.05  # benchmarks.ctr_model.LEARNING_RATE, without importing TensorFlow
_RAW_SCRIPTS = {EMBEDDING.name: PACKAGE + ".raw_tf1_embedding", CTR: PACKAGE + ".raw_tf1_ctr"}
# The raw script runs until the harness stops it (see run_options).
RAW_UNBOUNDED_STEPS = 10**9


@dataclasses.dataclass(frozen=True)
class CtrVariant:
    """Which ctr model: the id law (ctr_data.ID_LAWS), a table per field or one shared, its sizes."""

    ids: str = "zipf1.05"
    tables: str = "per_field"
    vocab: int = 1_000_000
    dim: int = 8

    def raw_flags(self) -> list[str]:
        return [
            f"--ctr_ids={self.ids}",
            f"--ctr_tables={self.tables}",
            f"--ctr_vocab={self.vocab}",
            f"--ctr_dim={self.dim}",
        ]

    def params(self, dynamic: bool = False) -> str:
        """The model_fn's ``--params``; ``dynamic``: the tables as ps_toolkit.dynamic_embedding tables."""
        params = {"ids": self.ids, "tables": self.tables, "vocab": self.vocab, "dim": self.dim}
        return json.dumps({**params, "dynamic": True} if dynamic else params)


@dataclasses.dataclass(frozen=True)
class Config:
    """One benchmarked configuration of one system."""

    system: str
    model: str
    mode: str  # async or sync
    num_ps: int
    num_workers: int
    train_steps: int
    extra_flags: tuple = ()  # a lever under test, e.g. ("--steps_per_run=50",); later flags win
    ctr: CtrVariant | None = None  # the ctr model's variant (model "ctr" only)
    python: str | None = None  # the interpreter of real TFRA's environment (tfra_tf2_15 only)

    @property
    def num_ports(self) -> int:
        if self.system == SINGLE:
            return 0
        return self.num_ps + self.num_workers + (1 if self.system == TF2 else 0)


def run_options(config: Config, measure_s: float) -> dict:
    """Extra ``run_cluster`` arguments: the raw script's runs are measured by time.

    Its non-chief workers find no model when they start with the chief and
    sleep TF's 30 s recovery_wait_secs; its ps joins forever. So its run has no
    natural end worth waiting for: it is timed for ``measure_s`` once every
    worker is past warm-up, then stopped.
    """
    if config.system in (RAW, *TFRA_SYSTEMS):
        options = {"end_after_warm": (config.num_workers, measure_s), "exit_grace_s": 0.0}
        if config.model == CTR:
            # Its chief prints its AUC once past the steps the others train: wait for it.
            options["wait_for_event"] = "evaluated"
        return options
    return {}


def tasks(config: Config, ports: list[int], checkpoint_dir: str, data_dir: str) -> list[Task]:
    """The processes that run ``config``; ports as reserved by the caller (``config.num_ports``).

    ``data_dir`` holds the synthetic data as IDX files (benchmarks.synthetic.write_idx_dir):
    ps_toolkit reads it through its public --data_dir; the other systems make the same arrays in memory.
    """
    if config.system in TFRA_SYSTEMS:
        from benchmarks import tfra_systems

        return tfra_systems.tasks(config, ports, checkpoint_dir, config.python)
    common = [f"--model={config.model}", f"--train_steps={config.train_steps}"]
    if config.system == SINGLE:
        return [Task("single", ["-m", PACKAGE + ".single_process", *common])]
    addresses = [f"localhost:{port}" for port in ports]
    ps, workers = addresses[: config.num_ps], addresses[config.num_ps : config.num_ps + config.num_workers]
    common += [f"--ps_hosts={','.join(ps)}", f"--worker_hosts={','.join(workers)}"]
    if config.mode == SYNC:
        common.append("--sync_replicas")
    if config.ctr is not None:
        common += config.ctr.raw_flags() if config.system in (RAW, TF2) else []
    if config.system == TF2:
        return _tf2_tasks(config, common + [f"--chief_host={addresses[-1]}"])
    if config.system == RAW:
        script = _RAW_SCRIPTS.get(config.model, PACKAGE + ".raw_tf1_between_graph")
        common = ["-m", script, *common, f"--checkpoint_dir={checkpoint_dir}"]
        if config.model == CTR:
            # Timed after its chief has evaluated at the step the others stop at.
            common += [f"--warmup_steps={config.train_steps}", f"--auc_step={config.train_steps}"]
        else:
            common += [f"--warmup_steps={config.train_steps // 5}"]
        common += [f"--train_steps={RAW_UNBOUNDED_STEPS}"]
    else:
        common = [
            "-m",
            PACKAGE + ".toolkit_task",
            *_toolkit_model_flags(config, data_dir),
            *common[1:],
        ]
        common.append(f"--checkpoint_dir={checkpoint_dir}")
        # The benchmark's batch size and learning rate, as the raw script uses; the rest: run_task.py's defaults.
        batch_size, learning_rate = batch_and_rate(config.model)
        common += [f"--batch_size={batch_size}", f"--learning_rate={learning_rate}"]
        common += list(TOOLKIT_FLAGS[config.system])
    common += list(config.extra_flags)
    # The toolkit's tasks are forked from one fork server, as its launcher starts them;
    # the raw and TF2 scripts start as their users run them, one process each.
    fork = config.system != RAW
    result = [
        # The raw script's ps joins forever; the toolkit's ps exits by itself.
        Task(f"ps{i}", [*common, "--job_name=ps", f"--task_index={i}"], must_finish=config.system != RAW, fork=fork)
        for i in range(config.num_ps)
    ]
    result += [
        Task(f"worker{i}", [*common, "--job_name=worker", f"--task_index={i}"], fork=fork)
        for i in range(config.num_workers)
    ]
    return result


def batch_and_rate(model: str) -> tuple[int, float]:
    """The model's batch size and SGD learning rate, the same in every system."""
    if model == CTR:
        from benchmarks import ctr_data

        return ctr_data.CtrShape.batch_size, CTR_LEARNING_RATE
    return MODELS[model].batch_size, MODELS[model].learning_rate


def _toolkit_model_flags(config: Config, data_dir: str) -> list[str]:
    """How run_task.py is told the model: a built-in on the IDX files, or the embedding or ctr model's model_fn."""
    if config.model not in (EMBEDDING.name, CTR):
        return [f"--model={config.model}", f"--data_dir={data_dir}"]
    module = "benchmarks." + ("embedding_model" if config.model == EMBEDDING.name else "ctr_model")
    functions = ("model_fn", "input_fn", "eval_input_fn")
    result = [f"--{name}={module}:{name}" for name in functions] + ["--optimizer=sgd"]
    if config.ctr is not None:
        # The raw script's checkpoint policy (MonitoredTrainingSession's: every 600 s and at the
        # end) instead of every 100 steps: each save writes the whole 832 MB of tables. And its
        # evaluation policy: its chief alone evaluates the final model.
        # With dynamic tables (their rows only, no 832 MB): whole checkpoints by steps and deltas between them,
        # whose sizes the record holds (benchmarks.checkpoint_sizes).
        dynamic = config.system == TOOLKIT_DYNAMIC
        saves = checkpoint_sizes.save_flags(config.train_steps) if dynamic else ["--save_checkpoint_secs=600"]
        result += [f"--params={config.ctr.params(dynamic=dynamic)}", *saves, "--final_evaluation=chief"]
    return result


def _tf2_tasks(config: Config, common: list) -> list[Task]:
    script = PACKAGE + {EMBEDDING.name: ".tf2_pss_embedding", CTR: ".tf2_pss_ctr"}.get(config.model, ".tf2_pss")
    base = ["-m", script, *common]
    servers = [
        Task(f"{job}{i}", [*base, f"--job_name={job}", f"--task_index={i}"], must_finish=False)
        for job, count in (("ps", config.num_ps), ("worker", config.num_workers))
        for i in range(count)
    ]
    return [*servers, Task("chief", [*base, "--job_name=chief", "--task_index=0"])]
