"""Runs one task end to end: start its server, then serve (ps), train (chief, worker) or evaluate (evaluator)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import time
from collections.abc import Callable

from ps_toolkit.base import paths
from ps_toolkit.cluster.config import EVALUATOR, PS, ClusterConfig
from ps_toolkit.dynamic_embedding import ps_memory
from ps_toolkit.task import server as server_lib
from ps_toolkit.task.roles import ps as ps_role
from ps_toolkit.training.config import TrainConfig
from ps_toolkit.training.model_api import ModelDefinition
from ps_toolkit.training.progress_report import print_result

log = logging.getLogger(__name__)


def run_task(
    cluster: ClusterConfig,
    config: TrainConfig,
    load_definition: Callable[[], ModelDefinition],
    *,
    ps_orphan_timeout_secs: float,
    ends_with_exit: bool = False,
) -> dict:
    """Runs this task's role to its end and prints its result line; returns the result.

    ``ends_with_exit``: the caller ends the process with os._exit right after
    (run_task.py), so closing sessions need not be waited for past a bound.

    ``load_definition`` is called only by the tasks that build the model, and
    before their server starts: a missing module, data set or a model_fn that
    returns no loss in TRAIN mode is reported before anyone waits for this task
    (a training replica builds its graph before it starts its server; the
    evaluator and an export check theirs in a scratch graph). A training
    replica's EVAL mode is built after its first step, and a break there ends
    the task then (``FinalEvaluationHook``).
    """
    if cluster.task_type == PS:
        result = _serve(cluster, ps_orphan_timeout_secs)
    else:
        definition = load_definition()
        from ps_toolkit.placement import strategies
        from ps_toolkit.training import model_check

        partitioner = strategies.variable_partitioner(cluster) if config.partition_variables else None
        if cluster.task_type == EVALUATOR:
            from ps_toolkit.task.roles import evaluator

            model_check.check_eval_definition(definition)
            result = evaluator.evaluate_checkpoints(cluster, config, definition, partitioner)
        else:
            if cluster.is_chief and config.export_dir:
                model_check.check_export_definition(definition, cluster, config)
            result = _train(cluster, config, definition, partitioner, ends_with_exit)
    print_result(result)
    return result


def _serve(cluster: ClusterConfig, ps_orphan_timeout_secs: float) -> dict:
    started = time.monotonic()
    # Before the server: a bad PS_TOOLKIT_PS_MEMORY_MB is one line and exit 2.
    memory = ps_memory.memory_of_this_host(list(cluster.jobs[PS]), cluster.task_index)
    server = server_lib.start_server(cluster)
    ps_role.publish_memory(cluster, server, memory)
    finished = ps_role.serve_until_done(cluster, server, orphan_timeout_secs=ps_orphan_timeout_secs)
    return {
        "job": cluster.task_type,
        "task": cluster.task_index,
        "replicas_done": len(finished),
        "seconds": round(time.monotonic() - started, 3),
    }


def _train(
    cluster: ClusterConfig, config: TrainConfig, definition: ModelDefinition, partitioner, ends_with_exit: bool
) -> dict:
    from ps_toolkit.task import checkpoints
    from ps_toolkit.task.roles import trainer

    if cluster.is_chief:
        checkpoints.prepare_checkpoint_dir(config.checkpoint_dir)
    session_config = server_lib.session_config(cluster)
    servers = []

    def start_server() -> str:
        servers.append(server_lib.start_server(cluster, session_config))
        if cluster.is_chief:
            write_run_record(config.checkpoint_dir, cluster, config, definition)
        return servers[0].target

    done = ps_role.DoneSignalHook(cluster)
    # A process that ends with os._exit may leave its sessions' closes running; one that exits normally may not.
    bounded = ends_with_exit
    result = trainer.train(
        cluster, start_server, config, definition, session_config, final_hooks=[done], bound_session_close=bounded
    )
    # Close the chief's summary writers now: nothing must depend on interpreter exit.
    tf_summary_writers_flush()
    if not done.sent:
        ps_role.signal_done(cluster, servers[0].target)
    if cluster.is_chief and config.export_dir:
        from ps_toolkit.training import export, input_pipeline

        context = input_pipeline.input_context(cluster, config)
        result["export_dir"] = export.export_saved_model(
            definition, context, config.checkpoint_dir, config.export_dir, partitioner
        )
    return result


def tf_summary_writers_flush() -> None:
    import tensorflow as tf

    tf.compat.v1.summary.FileWriterCache.clear()


def write_run_record(checkpoint_dir: str, cluster: ClusterConfig, config: TrainConfig, definition) -> None:
    """The chief records the effective flags beside its checkpoints (flags.json)."""
    os.makedirs(checkpoint_dir, exist_ok=True)
    record = {
        "cluster": {job: list(hosts) for job, hosts in cluster.jobs.items()},
        "cluster_source": cluster.source,
        "train_config": dataclasses.asdict(config),
        "model": definition.name,
        "params": _jsonable(definition.params),
        "effective_learning_rate": config.learning_rate_for(definition.default_learning_rates),
        "argv": sys.argv,
    }
    # Not through a symbolic link someone planted in the folder (paths.write_file_nofollow).
    paths.write_file_nofollow(os.path.join(checkpoint_dir, "flags.json"), json.dumps(record, indent=2, sort_keys=True))


def _jsonable(params) -> dict:
    return json.loads(json.dumps(dict(params), default=repr))
