"""The model_fn seam in one process: every optimizer, a model's own train_op, placement of slots and sparse tables."""

import logging
import os
import re
import sys

import pytest
import tensorflow as tf

from ps_toolkit.cluster.config import ClusterConfig
from ps_toolkit.launch.local_cluster import InProcessCluster
from ps_toolkit.models import classifiers
from ps_toolkit.task.roles import trainer
from ps_toolkit.training import replica_graph
from ps_toolkit.training.config import TrainConfig
from ps_toolkit.training.model_api import ModelDefinition
from ps_toolkit.training.optimizers import OPTIMIZER_NAMES

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "user_models"))
import clicks  # noqa: E402

CLICKS = ModelDefinition(clicks.model_fn, clicks.input_fn, clicks.eval_input_fn, name="clicks")


def _train(definition, tmp_path, **config):
    config = TrainConfig(checkpoint_dir=str(tmp_path), **{"train_steps": 40, "batch_size": 32, **config})
    with InProcessCluster(num_ps=1, num_workers=1) as cluster:
        return trainer.train(cluster.cluster_config("worker", 0), cluster.targets["worker"][0], config, definition)


@pytest.mark.parametrize("optimizer", OPTIMIZER_NAMES)
@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
def test_every_optimizer_trains_async_and_sync(tmp_path, optimizer, sync):
    result = _train(
        classifiers.definition("softmax"), tmp_path, optimizer=optimizer, sync_replicas=sync, steps_per_run=10
    )
    assert result["global_step"] == 40, result
    assert result["eval"]["accuracy"] > 0.5, result


def test_a_model_fn_with_its_own_train_op_runs_as_it_is(tmp_path, caplog):
    definition = ModelDefinition(clicks.own_train_op_model_fn, clicks.input_fn, clicks.eval_input_fn, name="own")
    with caplog.at_level(logging.WARNING, logger="ps_toolkit.training.replica_graph"):
        result = _train(definition, tmp_path, steps_per_run=20, sync_replicas=True)
    assert result["global_step"] >= 40 and result["local_steps"] >= 40, result
    assert set(result["eval"]) == {"auc", "loss"}, result
    levers = [r.message for r in caplog.records if "its own train_op" in r.message]
    assert len(levers) == 1 and "--steps_per_run" in levers[0] and "--sync_replicas" in levers[0], levers


CLUSTER_2PS = ClusterConfig(
    jobs={"ps": ("ps0:1", "ps1:1"), "worker": ("w0:1", "w1:1")}, task_type="worker", task_index=0
)


def _graph(config: TrainConfig) -> tf.Graph:
    graph = tf.Graph()
    with graph.as_default():
        replica_graph.build(CLUSTER_2PS, config, CLICKS)
    return graph


@pytest.mark.parametrize(
    "config",
    [
        TrainConfig(optimizer="adagrad", steps_per_run=20),
        TrainConfig(optimizer="adagrad", steps_per_run=1, pack_transfers=False),
        TrainConfig(optimizer="adam", steps_per_run=20, sync_replicas=True),
        TrainConfig(optimizer="adagrad", steps_per_run=1, sync_replicas=True),
    ],
    ids=["async-loop", "async-one-step-unpacked", "sync-loop", "sync-one-step"],
)
def test_a_step_moves_only_the_rows_it_looks_up(config):
    """No op on the worker takes a tensor as large as a table partition: lookups and updates stay on the ps."""
    graph = _graph(config)
    parts = [v for v in graph.get_collection("variables") if re.fullmatch(r"model/embeddings/part_\d+:0", v.name)]
    assert len(parts) == 2 and {p.device for p in parts} == {"/job:ps/task:0", "/job:ps/task:1"}, parts
    part_elements = parts[0].shape.num_elements()
    whole = []
    for op in graph.get_operations():
        if not op.device.startswith("/job:worker"):
            continue
        for tensor in op.inputs:
            if tensor.shape.is_fully_defined() and tensor.shape.num_elements() >= part_elements:
                whole.append(f"{op.name} <- {tensor.name} {tensor.shape}")
    assert not whole, whole[:5]
    # The updates of the table are sparse, on the ps holding each part.
    sparse_updates = {
        op.device for op in graph.get_operations() if op.type.startswith(("ResourceSparseApply", "ResourceScatter"))
    }
    assert {"/job:ps/task:0", "/job:ps/task:1"} <= sparse_updates, sparse_updates


def test_slots_live_with_their_variables():
    graph = _graph(TrainConfig(optimizer="adam", steps_per_run=20))
    variables = {v.op.name: v for v in graph.get_collection("variables")}
    slots = {name: v for name, v in variables.items() if name.endswith(("/Adam", "/Adam_1"))}
    assert slots, sorted(variables)
    for name, slot in slots.items():
        primary = variables[name.rsplit("/", 1)[0]]
        assert slot.device == primary.device, (name, slot.device, primary.device)
