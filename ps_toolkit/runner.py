"""Runs one task end to end: start its server, then serve (ps) or train (replica)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import time

from ps_toolkit import paths
from ps_toolkit import server as server_lib
from ps_toolkit.cluster import PS, ClusterConfig
from ps_toolkit.data import load_dataset
from ps_toolkit.hooks import print_result
from ps_toolkit.train_config import TrainConfig

log = logging.getLogger(__name__)


def run_server_task(cluster: ClusterConfig, config: TrainConfig, *, ps_orphan_timeout_secs: float) -> dict:
    """Runs a ps or a training replica to its end and prints its result line."""
    started = time.monotonic()
    if cluster.task_type == PS:
        server = server_lib.start_server(cluster)
        finished = server_lib.serve_until_done(cluster, server, orphan_timeout_secs=ps_orphan_timeout_secs)
        result = {
            "job": cluster.task_type,
            "task": cluster.task_index,
            "replicas_done": len(finished),
            "seconds": round(time.monotonic() - started, 3),
        }
    else:
        # Data first: a missing or corrupt data set is reported before any server starts.
        data = load_dataset(config.data_dir)
        from ps_toolkit import checkpoints, training

        if cluster.is_chief:
            checkpoints.prepare_checkpoint_dir(config.checkpoint_dir)

        session_config = server_lib.session_config(cluster)
        server = server_lib.start_server(cluster, session_config)
        if cluster.is_chief:
            write_run_record(config.checkpoint_dir, cluster, config)
        result = training.train(cluster, server.target, config, data, session_config)
        # Close the chief's summary writers now: nothing must depend on interpreter exit.
        tf_summary_writers_flush()
        server_lib.signal_done(cluster, server.target)
    print_result(result)
    return result


def tf_summary_writers_flush() -> None:
    import tensorflow as tf

    tf.compat.v1.summary.FileWriterCache.clear()


def write_run_record(checkpoint_dir: str, cluster: ClusterConfig, config: TrainConfig) -> None:
    """The chief records the effective flags beside its checkpoints (flags.json)."""
    os.makedirs(checkpoint_dir, exist_ok=True)
    record = {
        "cluster": {job: list(hosts) for job, hosts in cluster.jobs.items()},
        "cluster_source": cluster.source,
        "train_config": dataclasses.asdict(config),
        "effective_learning_rate": config.effective_learning_rate,
        "argv": sys.argv,
    }
    # Not through a symbolic link someone planted in the folder (paths.write_file_nofollow).
    paths.write_file_nofollow(os.path.join(checkpoint_dir, "flags.json"), json.dumps(record, indent=2, sort_keys=True))


def run_evaluator(cluster: ClusterConfig, config: TrainConfig) -> dict:
    """Evaluates every new checkpoint until the last training step."""
    from ps_toolkit import evaluation

    result = evaluation.evaluate_checkpoints(cluster, config, load_dataset(config.data_dir))
    print_result(result)
    return result
