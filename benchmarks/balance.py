"""Placement balance of each model over the ps tasks, via ps_toolkit.placement.strategies.placement_report."""

from __future__ import annotations

import tensorflow as tf

from ps_toolkit.cluster.config import ClusterConfig
from ps_toolkit.models.classifiers import NETWORKS
from ps_toolkit.placement import strategies


def balance(model: str, num_ps: int, strategy: str, partition: bool = False) -> dict:
    """Bytes per ps task and the imbalance (max/mean) of ``model`` placed by ``strategy``."""
    cluster = ClusterConfig(
        jobs={"ps": tuple(f"ps{i}:2222" for i in range(num_ps)), "worker": ("w0:2222",)},
        task_type="worker",
        task_index=0,
    )
    with tf.Graph().as_default() as graph:
        with tf.compat.v1.device(strategies.device_setter(cluster, strategy)):
            tf.compat.v1.train.get_or_create_global_step()
            images = tf.compat.v1.placeholder(tf.float32, [None, 784])
            partitioner = strategies.variable_partitioner(cluster) if partition else None
            with tf.compat.v1.variable_scope("model", partitioner=partitioner):
                NETWORKS[model](images)
        report = strategies.placement_report(graph, num_ps=num_ps)
    return {
        "model": model,
        "num_ps": num_ps,
        "strategy": strategy + (" + partitioned" if partition else ""),
        "bytes_per_task": list(report.bytes_per_task.values()),
        "imbalance": round(report.imbalance, 3),
    }


def balance_table(models, num_ps: int = 2) -> list[dict]:
    """The dense models' placement (the embedding model's table is split by its own partitioner)."""
    return [
        balance(m, num_ps, s, p)
        for m in models
        if m in NETWORKS
        for s, p in (("round_robin", False), ("greedy", False), ("round_robin", True))
    ]
