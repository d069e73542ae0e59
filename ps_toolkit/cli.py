"""Flag definitions and error reporting shared by the scripts (nothing runs at import).

Scripts call ``define_*_flags()`` once, then turn the parsed flags into a
``ClusterConfig`` and a ``TrainConfig``. Bad input is reported as one line on
stderr with the permanent exit status, never as a traceback.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Callable, Mapping

from absl import app, flags

from ps_toolkit.base.errors import EXIT_CONFIG, PS_ORPHAN_TIMEOUT_SECS, ConfigError, ToolkitError
from ps_toolkit.cluster import config as cluster_lib
from ps_toolkit.cluster import slurm, sources
from ps_toolkit.cluster.tf_config import TF_CONFIG_ENV, tf_config_text
from ps_toolkit.models.names import MODEL_NAMES
from ps_toolkit.placement.choices import NEAR_WEIGHTS_MODES
from ps_toolkit.placement.registry import BUILT_IN_STRATEGIES
from ps_toolkit.training import user_code
from ps_toolkit.training.config import TrainConfig
from ps_toolkit.training.model_api import ModelDefinition
from ps_toolkit.training.optimizers import OPTIMIZER_NAMES

FLAGS = flags.FLAGS


def define_cluster_flags() -> None:
    for job in ("ps", "worker", "chief", "evaluator"):
        flags.DEFINE_string(f"{job}_hosts", None, f"Comma-separated host:port list of the {job} job.")
    flags.DEFINE_string("job_name", None, "This task's job: ps, worker, chief or evaluator.")
    flags.DEFINE_integer("task_index", None, "This task's index within its job (default 0).")
    flags.DEFINE_string("cluster_file", None, "JSON file with the cluster ({'cluster': {...}} or a job map).")
    flags.DEFINE_string(
        "cluster_from",
        None,
        "Where the cluster comes from instead of the host flags: slurm (the srun step this task runs in), tf_config, "
        "a source registered with ps_toolkit.cluster.sources.register_source, or MODULE:FUNCTION (environ, options).",
    )
    flags.DEFINE_integer("slurm_num_ps", 1, "--cluster_from=slurm: the first N ranks are ps, the rest workers.")
    flags.DEFINE_string("slurm_roles", None, "--cluster_from=slurm: jobs in rank order instead, e.g. ps:1,worker:*.")
    flags.DEFINE_integer("slurm_port_base", slurm.DEFAULT_BASE_PORT, "--cluster_from=slurm: first port on each node.")


# The flags that name a user's model; without --model_fn the built-in --model trains.
MODEL_FN_FLAGS = ("model_fn", "input_fn", "eval_input_fn", "params")


def define_training_flags() -> None:
    flags.DEFINE_string("model_fn", None, "Your model: MODULE:FUNCTION, model_fn(features, labels, mode, params).")
    flags.DEFINE_string("input_fn", None, "With --model_fn: MODULE:FUNCTION returning the training tf.data.Dataset.")
    flags.DEFINE_string("eval_input_fn", None, "With --model_fn: MODULE:FUNCTION returning the (finite) eval dataset.")
    flags.DEFINE_string("params", None, "With --model_fn: a JSON object passed to model_fn as params.")
    flags.DEFINE_enum("model", "softmax", list(MODEL_NAMES), "Built-in MNIST model to train without --model_fn.")
    flags.DEFINE_string("data_dir", None, "Built-in models: folder with the MNIST IDX files; default: embedded digits.")
    flags.DEFINE_integer(
        "train_steps", 1000, "Global steps to train for; 0: no limit, until SIGTERM / Ctrl-C (the chief saves, exit 0)."
    )
    flags.DEFINE_integer("batch_size", 100, "Examples per replica per step.")
    flags.DEFINE_enum("optimizer", "sgd", list(OPTIMIZER_NAMES), "Optimizer the toolkit builds for the model's loss.")
    flags.DEFINE_float("learning_rate", None, "Default: the built-in model's, else the optimizer's.")
    flags.DEFINE_integer("eval_steps", None, "Batches per evaluation; default: the whole eval dataset.")
    flags.DEFINE_enum(
        "final_evaluation",
        "every_replica",
        ["every_replica", "chief"],
        "Which replicas evaluate the final model: each (its result has 'eval'), or the chief alone.",
    )
    flags.DEFINE_string("export_dir", None, "The chief writes a SavedModel of the PREDICT graph here at the end.")
    flags.DEFINE_boolean("sync_replicas", False, "Aggregate gradients with SyncReplicasOptimizer.")
    flags.DEFINE_integer("replicas_to_aggregate", None, "Gradients per sync step; default: all replicas.")
    flags.DEFINE_string(
        "checkpoint_dir",
        None,
        "Where the chief writes checkpoints and summaries; a run that finds checkpoints there resumes from them. "
        "Default: run_task.py $TMPDIR/ps_toolkit-<uid>/checkpoints/<chief address>; "
        "launch_local.py: a fresh one in the run folder.",
    )
    flags.DEFINE_integer("save_checkpoint_steps", 100, "Chief saves a checkpoint every N global steps.")
    flags.DEFINE_float("save_checkpoint_secs", None, "Save every N seconds instead of every N steps.")
    flags.DEFINE_float(
        "delta_checkpoint_secs",
        None,
        "Also write a delta checkpoint of the dynamic tables every N seconds: the rows changed since the last "
        "whole checkpoint (docs/online.md). Whole checkpoints keep their own interval.",
    )
    flags.DEFINE_integer("delta_checkpoint_steps", None, "Write a delta checkpoint every N global steps.")
    flags.DEFINE_integer("save_summaries_steps", 100, "Chief writes summaries every N steps.")
    flags.DEFINE_string(
        "placement",
        "round_robin",
        f"How variables go to ps tasks: {', '.join(BUILT_IN_STRATEGIES)}, a strategy registered with "
        "ps_toolkit.placement.registry.register_strategy, or MODULE:FUNCTION, a strategy function (num_ps, seed).",
    )
    flags.DEFINE_boolean("partition_variables", False, "Split large variables along axis 0 across ps tasks.")
    flags.DEFINE_integer("seed", 0, "Base seed; each replica shuffles with its own derived seed.")
    flags.DEFINE_integer("steps_per_run", 20, "Training steps per session.run (in-graph loop), async or sync.")
    flags.DEFINE_enum(
        "compute_near_weights",
        "auto",
        list(NEAR_WEIGHTS_MODES),
        "Which fully connected layers run on the ps holding their weights: auto (large ones), all, none.",
    )
    flags.DEFINE_boolean(
        "pack_transfers", True, "Move the small parameters and their gradients as one tensor per ps each way."
    )
    flags.DEFINE_boolean(
        "unique_ids", True, "ps_toolkit.embedding_lookups: look up each distinct id once per step, sum its gradient."
    )
    flags.DEFINE_boolean(
        "group_lookups", True, "ps_toolkit.embedding_lookups: all the tables' rows in one transfer per ps each way."
    )
    flags.DEFINE_enum(
        "wire_dtype", "float32", ["float32", "bfloat16"], "ps_toolkit.embedding_lookups: rows on the wire as this."
    )
    flags.DEFINE_float(
        "readiness_poll_secs",
        0.2,
        "Longest wait between a non-chief's checks that the model is ready (the first waits: 0.05 s, doubling).",
    )
    flags.DEFINE_float(
        "watchdog_secs", 300.0, "No global-step progress this long ends the task with status 200 (retryable); 0: off."
    )


def define_ps_flags() -> None:
    """Flags of a parameter-server task (run_task.py's; launch_local.py passes them through)."""
    flags.DEFINE_float(
        "ps_orphan_timeout_secs",
        PS_ORPHAN_TIMEOUT_SECS,
        "A ps exits (status 3) when no unfinished worker was reachable this long.",
    )


def define_port_flags() -> None:
    """Whether a task guards its port (run_task.py's; launch_local.py passes it through)."""
    flags.DEFINE_boolean(
        "allow_open_ports",
        False,
        "Serve on every interface without packet-filter rules (else: rules admit only loopback and the "
        "cluster's hosts, or the task refuses to start where none can be installed).",
    )


def names_defined_by(define) -> list[str]:
    """Runs ``define()`` (e.g. ``define_training_flags``); returns the names of the flags it defined."""
    before = set(FLAGS)
    define()
    return [name for name in FLAGS if name not in before and FLAGS[name].name == name]


HELP_FLAGS = ("--help", "-help", "-h", "-?", "--helpshort", "-helpshort")
HELPFULL_FLAGS = ("--helpfull", "-helpfull")


def print_help_and_exit_if_asked(argv: list[str], usage: str) -> None:
    """``--help``: the script's usage and its own flags (absl's key flags of the main module),
    with defaults and choices, exit 0. ``--helpfull``: every flag, absl's own included, exit 0."""
    asked = [arg for arg in argv[1:] if arg in HELP_FLAGS + HELPFULL_FLAGS]
    if not asked:
        return
    if asked[0] in HELPFULL_FLAGS:
        text = FLAGS.get_help()
    else:
        text = FLAGS.main_module_help() + "\n\n--helpfull lists every flag, absl's and TensorFlow's included."
    sys.stdout.write(usage.strip("\n") + "\n\nflags:\n" + text + "\n")
    sys.stdout.flush()
    raise SystemExit(0)


_SOURCE_OPTIONS = ("slurm_num_ps", "slurm_port_base", "slurm_roles")


def cluster_from_flags(environ: Mapping[str, str] | None = None) -> cluster_lib.ClusterConfig:
    """This task's cluster: from ``--cluster_from``'s source, else from the host flags, --cluster_file or TF_CONFIG.

    Args:
        environ: The task's environment (default: this process's).

    Raises:
        ConfigError: an unknown source, flags that contradict the source, or a cluster the source cannot use.
    """
    environ = os.environ if environ is None else environ
    tf_config = tf_config_text(environ)
    name = FLAGS.cluster_from
    if not name:
        return cluster_lib.resolve(
            ps_hosts=FLAGS.ps_hosts,
            worker_hosts=FLAGS.worker_hosts,
            chief_hosts=FLAGS.chief_hosts,
            evaluator_hosts=FLAGS.evaluator_hosts,
            job_name=FLAGS.job_name,
            task_index=FLAGS.task_index,
            cluster_file=FLAGS.cluster_file,
            tf_config=tf_config,
        )
    if ":" in name:  # a user's source function, by MODULE:FUNCTION
        sources.register_source(name, user_code.load(name, "cluster_from"))
    sources.SOURCES.check(name)
    names = ("ps_hosts", "worker_hosts", "chief_hosts", "evaluator_hosts", "job_name", "task_index", "cluster_file")
    given = [f"--{flag}" for flag in names if FLAGS[flag].value is not None]
    given += [TF_CONFIG_ENV] * bool(tf_config and name != "tf_config")
    if given:
        raise ConfigError(f"--cluster_from={name} takes the cluster from it; do not also give {', '.join(given)}")
    return sources.cluster_from_source(name, environ, {flag: FLAGS[flag].value for flag in _SOURCE_OPTIONS})


def train_config_from_flags() -> TrainConfig:
    return TrainConfig(
        model=FLAGS.model,
        train_steps=FLAGS.train_steps,
        batch_size=FLAGS.batch_size,
        optimizer=FLAGS.optimizer,
        learning_rate=FLAGS.learning_rate,
        eval_steps=FLAGS.eval_steps,
        final_evaluation=FLAGS.final_evaluation,
        export_dir=FLAGS.export_dir,
        sync_replicas=FLAGS.sync_replicas,
        replicas_to_aggregate=FLAGS.replicas_to_aggregate,
        checkpoint_dir=FLAGS.checkpoint_dir,
        save_checkpoint_steps=FLAGS.save_checkpoint_steps,
        save_checkpoint_secs=FLAGS.save_checkpoint_secs,
        delta_checkpoint_secs=FLAGS.delta_checkpoint_secs,
        delta_checkpoint_steps=FLAGS.delta_checkpoint_steps,
        save_summaries_steps=FLAGS.save_summaries_steps,
        placement=FLAGS.placement,
        partition_variables=FLAGS.partition_variables,
        seed=FLAGS.seed,
        readiness_poll_secs=FLAGS.readiness_poll_secs,
        # 20 by default, async and sync; 0 is refused (TrainConfig.validate), not taken as a default.
        steps_per_run=FLAGS.steps_per_run,
        watchdog_secs=FLAGS.watchdog_secs,
        compute_near_weights=FLAGS.compute_near_weights,
        pack_transfers=FLAGS.pack_transfers,
        unique_ids=FLAGS.unique_ids,
        group_lookups=FLAGS.group_lookups,
        wire_dtype=FLAGS.wire_dtype,
        data_dir=FLAGS.data_dir,
    )


def check_model_flags() -> None:
    """The model flags, checked without importing the user's modules or TensorFlow."""
    if not FLAGS.model_fn:
        given = [f"--{name}" for name in MODEL_FN_FLAGS if FLAGS[name].value is not None]
        if given:
            raise ConfigError(f"{given[0]} needs --model_fn=MODULE:FUNCTION (without it the built-in --model trains)")
        return
    if FLAGS["model"].present:
        raise ConfigError(
            f"--model={FLAGS.model} names a built-in model and --model_fn={FLAGS.model_fn} your own; give one"
        )
    if FLAGS.data_dir is not None:
        raise ConfigError(
            "--data_dir is the built-in models' MNIST folder; give your input_fn its data through --params"
        )
    if not FLAGS.input_fn:
        raise ConfigError(f"--model_fn={FLAGS.model_fn} needs --input_fn=MODULE:FUNCTION for its training data")
    for name in ("model_fn", "input_fn", "eval_input_fn"):
        if FLAGS[name].value:
            user_code.locate(FLAGS[name].value, name)
    user_code.parse_params(FLAGS.params)


def model_definition_from_flags(config: TrainConfig) -> ModelDefinition:
    """The model the flags name: --model_fn and its input functions, imported, or the built-in --model."""
    if not FLAGS.model_fn:
        from ps_toolkit.models import classifiers

        return classifiers.definition(config.model, config.data_dir, seed=config.seed)
    return ModelDefinition(
        model_fn=user_code.load(FLAGS.model_fn, "model_fn"),
        input_fn=user_code.load(FLAGS.input_fn, "input_fn"),
        eval_input_fn=user_code.load(FLAGS.eval_input_fn, "eval_input_fn") if FLAGS.eval_input_fn else None,
        params=user_code.parse_params(FLAGS.params),
        name=FLAGS.model_fn,
    )


def with_checkpoint_dir(config: TrainConfig, checkpoint_dir: str) -> TrainConfig:
    return dataclasses.replace(config, checkpoint_dir=checkpoint_dir)


def program_name() -> str:
    return os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "ps_toolkit"


def fail(message: str, exit_code: int = EXIT_CONFIG):
    """Reports bad input as one line on stderr and exits; never returns."""
    sys.stderr.write(f"{program_name()}: error: {message}\n")
    sys.stderr.flush()
    raise SystemExit(exit_code)


@contextlib.contextmanager
def user_errors():
    """Turns a ToolkitError into its one-line message and exit status."""
    try:
        yield
    except ToolkitError as err:
        fail(str(err), err.exit_code)


def run_tool(main: Callable[[list[str]], None], module_name: str) -> None:
    """Runs a tool module's absl ``main`` as the program, whichever way it was started.

    The same ``--help`` (the module's docstring and its own flags) for ``ps-<tool>``,
    ``python -m ps_toolkit.tools.<tool>`` and ``python scripts/<tool>.py``.
    """
    module = sys.modules[module_name]
    register_key_flags_for_program(module_name)
    app.run(main, flags_parser=lambda argv: parse_flags_or_exit(argv, module.__doc__ or ""))


def register_key_flags_for_program(module_name: str) -> None:
    """Makes a tool module's own flags the ones ``--help`` lists: absl lists those of ``sys.argv[0]``."""
    if module_name != "__main__":
        for flag in FLAGS.get_key_flags_for_module(module_name):
            FLAGS.register_key_flag_for_module(sys.argv[0], flag)


def parse_flags_or_exit(argv: list[str], usage: str | None = None) -> list[str]:
    """absl's flags_parser: a bad flag is one line and exit 2, not absl's usage dump."""
    if usage is None:
        usage = sys.modules["__main__"].__doc__ or ""
    print_help_and_exit_if_asked(argv, usage)
    try:
        return FLAGS(argv)
    except flags.Error as err:
        fail(f"{err} (from the command line)")
