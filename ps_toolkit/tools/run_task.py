"""Runs one task of a parameter-server cluster: a ps, a worker, the chief or the evaluator.

    python scripts/run_task.py --job_name=ps --task_index=0          # textbook cluster:
    python scripts/run_task.py --job_name=worker --task_index=0      # 1 ps + 2 workers on
    python scripts/run_task.py --job_name=worker --task_index=1      # localhost:2222-2224

The cluster comes from --ps_hosts/--worker_hosts/..., from TF_CONFIG, or from
--cluster_file. Every task exits by itself when training is done: 0 on
success, 2 on bad input (one line on stderr), see ps_toolkit/base/errors.py.
``kill -USR1 <pid>`` writes every thread's Python stack to the task's stderr
(its log): where a task that does not end is waiting.
"""

import os

from absl import flags, logging

from ps_toolkit import cli
from ps_toolkit.base import environment_errors, flag_ranges, paths, tf_import
from ps_toolkit.cluster import preflight
from ps_toolkit.cluster.config import ClusterConfig
from ps_toolkit.task import startup, tolerant_streams
from ps_toolkit.training.config import TrainConfig

tf_import.prefer_lean_import()

cli.define_cluster_flags()
cli.define_training_flags()
cli.define_ps_flags()
cli.define_port_flags()
flags.adopt_module_key_flags(cli)  # --help lists them as this script's own


def default_checkpoint_dir(cluster: ClusterConfig) -> str:
    """A per-cluster folder in this user's private state folder, so a restarted chief finds
    its checkpoints again; nobody else can create or replace anything in it."""
    chief_job, chief_index = cluster.chief_task
    chief = cluster.jobs[chief_job][chief_index].replace(":", "_").replace("/", "_")
    return os.path.join(paths.state_subdir("checkpoints"), chief)


def run(cluster: ClusterConfig, config: TrainConfig) -> None:
    # TensorFlow is imported only once the input is known to be good: a typo
    # in a flag is reported in milliseconds, not after a 3-second import.
    from ps_toolkit.task import runner

    runner.run_task(
        cluster,
        config,
        lambda: cli.model_definition_from_flags(config),
        ps_orphan_timeout_secs=flags.FLAGS.ps_orphan_timeout_secs,
        ends_with_exit=True,  # _main ends with startup.finish (os._exit)
    )


def _main(argv):
    tolerant_streams.install()  # a full log disk drops output instead of ending the task
    if len(argv) > 1:
        cli.fail(f"unexpected arguments {' '.join(argv[1:])!r}; flags look like --name=value")
    with cli.user_errors():
        cluster = cli.cluster_from_flags()
        config = cli.train_config_from_flags()
        if config.checkpoint_dir is None:
            config = cli.with_checkpoint_dir(config, default_checkpoint_dir(cluster))
        config.validate(cluster)
        flag_ranges.check_seconds(
            "ps_orphan_timeout_secs", flags.FLAGS.ps_orphan_timeout_secs, zero_ok=True, none_ok=False
        )
        cli.check_model_flags()
        preflight.check_data_dir(config.data_dir)
        if config.train_steps:  # a job with no step limit takes its signals once begin is done
            startup.exit_on_interrupt(f"run_task.py {cluster.device}")
        port = startup.begin(cluster, allow_open_ports=flags.FLAGS.allow_open_ports)
        if not config.train_steps:  # no step limit: a signal is how the job ends
            startup.stop_on_signals(f"run_task.py {cluster.device}")
        logging.info(
            "%s of %s; port %s; checkpoints in %s", cluster.device, cluster.source, port, config.checkpoint_dir
        )
        with environment_errors.reported(f"{cluster.device} (checkpoints in {config.checkpoint_dir})"):
            run(cluster, config)
    logging.flush()
    startup.finish(0)


def main() -> None:
    """The ``ps-run-task`` command."""
    cli.run_tool(_main, __name__)


if __name__ == "__main__":
    main()
