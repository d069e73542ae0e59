"""``ps_toolkit.train``: this task's role in a parameter-server job, for a model_fn and its input_fn.

Design: docs/design.md, "The training seam and the public API".
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping

from ps_toolkit.base.errors import PS_ORPHAN_TIMEOUT_SECS
from ps_toolkit.cluster import config as cluster_lib
from ps_toolkit.cluster.config import ClusterConfig
from ps_toolkit.cluster.tf_config import tf_config_text
from ps_toolkit.training.config import TrainConfig
from ps_toolkit.training.model_api import ModelDefinition, function_name


def train(
    model_fn: Callable,
    input_fn: Callable,
    config: TrainConfig | None = None,
    cluster: ClusterConfig | None = None,
    params: Mapping | None = None,
    eval_input_fn: Callable | None = None,
    *,
    ps_orphan_timeout_secs: float = PS_ORPHAN_TIMEOUT_SECS,
    allow_open_ports: bool = False,
) -> dict:
    """Runs this task's role to its end and returns its result record (also printed as the last stdout line).

    Every task of the job runs the same program: a ps serves until every replica is
    done, the chief and the workers train, an evaluator evaluates each new checkpoint.
    A task of a cluster of several goes through the task start-up of every entry point:
    its port is kept private (the loopback cluster's own network namespace,
    packet-filter rules, or a refusal unless ``allow_open_ports``). A process with
    threads that joins its cluster's namespace is executed again inside it, with the
    same command line.

    Example (every task runs this, with its own TF_CONFIG):

        def model_fn(features, labels, mode, params):
            logits = tf.compat.v1.layers.dense(features["x"], 2)
            loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels, logits)
            return ps_toolkit.ModelSpec(mode, loss=loss, predictions={"logits": logits})

        result = ps_toolkit.train(model_fn, input_fn, config=ps_toolkit.TrainConfig(
            train_steps=1000, optimizer="adagrad", checkpoint_dir="/shared/run1"))

    Args:
        model_fn: ``model_fn(features, labels, mode, params) -> ModelSpec`` (docs/model_fn.md).
        input_fn: ``input_fn(input_context) -> tf.data.Dataset`` of (features, labels) batches.
        config: What to train and how; ``TrainConfig()``'s defaults if None.
        cluster: The cluster and this task's role; if None, from ``TF_CONFIG``, and with
            neither the model trains in this process alone (one worker, no ps).
        params: Passed to ``model_fn`` (and to an input_fn with a ``params`` argument).
        eval_input_fn: ``eval_input_fn() -> tf.data.Dataset``, finite: the final evaluation's
            and the evaluator's data.
        ps_orphan_timeout_secs: How long a ps waits with its workers unreachable before it
            ends with ``OrphanedError``.
        allow_open_ports: Start even where this task's port cannot be kept private.

    Returns:
        This task's result record (a replica's steps, losses and evaluation; a ps's
        replicas done), as printed.

    Raises:
        ConfigError: a setting that does not fit the cluster, or a model that does not keep the contract.
    """
    config = config or TrainConfig()
    alone = cluster is None and tf_config_text() is None
    cluster = cluster or _cluster_from_environment()
    if config.checkpoint_dir is None and cluster.num_replicas + cluster.num_ps == 1:
        config = _with_scratch_checkpoint_dir(config)
    config.validate(cluster)
    definition = ModelDefinition(
        model_fn=model_fn,
        input_fn=input_fn,
        eval_input_fn=eval_input_fn,
        params=dict(params or {}),
        name=function_name(model_fn),
    )
    from ps_toolkit.task import runner, startup  # TensorFlow only once the input is known to be good

    if not alone:  # a laptop run (no cluster, no TF_CONFIG) has no peers to protect a port for
        startup.begin(cluster, allow_open_ports=allow_open_ports)

    return runner.run_task(cluster, config, lambda: definition, ps_orphan_timeout_secs=ps_orphan_timeout_secs)


def _cluster_from_environment() -> ClusterConfig:
    """TF_CONFIG's cluster, or a one-worker cluster on a free loopback port."""
    tf_config = tf_config_text()
    if tf_config is not None:
        return cluster_lib.resolve(tf_config=tf_config)
    from ps_toolkit.launch.ports import reserve_ports

    with reserve_ports(1) as reservation:
        port = reservation.ports[0]
    return cluster_lib.resolve(worker_hosts=f"localhost:{port}", job_name="worker", task_index=0)


def _with_scratch_checkpoint_dir(config: TrainConfig) -> TrainConfig:
    import dataclasses

    return dataclasses.replace(config, checkpoint_dir=tempfile.mkdtemp(prefix="ps_toolkit-train-"))
