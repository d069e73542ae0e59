"""Fast tests of variable placement: device strings against a cluster of fake hosts."""

import json
import logging
import types

import pytest
import tensorflow as tf

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.cluster.config import ClusterConfig
from ps_toolkit.placement import registry
from ps_toolkit.placement.ps_strategies import GreedyLoadBalancingStrategy, RandomStrategy, byte_size_load_fn
from ps_toolkit.placement.registry import BUILT_IN_STRATEGIES
from ps_toolkit.placement.strategies import (
    PlacementReport,
    device_setter,
    log_placement_report,
    placement_report,
    variable_partitioner,
)


def make_cluster(num_ps: int, task_index: int = 1) -> ClusterConfig:
    """Fake hosts (nothing listens on them): worker task 1 of two."""
    return ClusterConfig.from_host_flags(
        ps_hosts=",".join(f"ps{i}:2222" for i in range(num_ps)) or None,
        worker_hosts="worker0:2222,worker1:2222",
        job_name="worker",
        task_index=task_index,
    )


def build(device_fn, sizes, dtype=tf.float32):
    """A graph with one variable per size (a vector of that many elements) and a sum."""
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.device(device_fn):
        variables = [tf.compat.v1.get_variable(f"v{i}", [n], dtype=dtype) for i, n in enumerate(sizes)]
        total = tf.add_n([tf.reduce_sum(v) for v in variables])
    return graph, variables, total


def devices(variables):
    return [v.op.device for v in variables]


def ps(task):
    return f"/job:ps/task:{task}"


def test_round_robin_matches_replica_device_setter():
    cluster = make_cluster(num_ps=2)
    _, variables, total = build(device_setter(cluster), [3, 3, 3])
    assert devices(variables) == [ps(0), ps(1), ps(0)]
    assert total.op.device == "/job:worker/task:1"

    ours, _, _ = build(device_setter(cluster, "round_robin"), [5, 6, 7, 8])
    theirs, _, _ = build(
        tf.compat.v1.train.replica_device_setter(cluster=cluster.cluster_spec(), worker_device=cluster.device),
        [5, 6, 7, 8],
    )
    assert [(op.name, op.device) for op in ours.get_operations()] == [
        (op.name, op.device) for op in theirs.get_operations()
    ]


def test_explicit_device_on_an_op_is_kept():
    setter = device_setter(make_cluster(num_ps=2))
    with tf.Graph().as_default(), tf.compat.v1.device(setter), tf.compat.v1.device("/device:CPU:0"):
        x = tf.constant(1.0)
    assert x.op.device == "/job:worker/task:1/device:CPU:0"


def test_greedy_balances_bytes_better_than_round_robin():
    # float32 vectors: 4000, 40, 40, 40 and 3960 bytes.
    sizes = [1000, 10, 10, 10, 990]
    cluster = make_cluster(num_ps=2)

    rr_graph, rr_vars, _ = build(device_setter(cluster, "round_robin"), sizes)
    assert devices(rr_vars) == [ps(0), ps(1), ps(0), ps(1), ps(0)]
    rr = placement_report(rr_graph)
    # task 0: 4000 + 40 + 3960 = 8000, task 1: 40 + 40 = 80; mean 4040.
    assert rr.bytes_per_task == {ps(0): 8000, ps(1): 80}
    assert rr.imbalance == pytest.approx(8000 / 4040)

    greedy_graph, greedy_vars, _ = build(device_setter(cluster, "greedy"), sizes)
    # 4000 -> 0 (tie: lowest index); 40, 40, 40 -> 1 (1 holds 0, 40, 80);
    # 3960 -> 1 (4000 > 120).
    assert devices(greedy_vars) == [ps(0), ps(1), ps(1), ps(1), ps(1)]
    greedy = placement_report(greedy_graph)
    assert greedy.bytes_per_task == {ps(0): 4000, ps(1): 4080}
    assert greedy.imbalance == pytest.approx(4080 / 4040)
    assert greedy.imbalance < rr.imbalance


def test_greedy_charges_a_colocated_variable_to_the_task_it_went_to():
    strategy = GreedyLoadBalancingStrategy(2, byte_size_load_fn)
    setter = tf.compat.v1.train.replica_device_setter(cluster=make_cluster(2).cluster_spec(), ps_strategy=strategy)
    with tf.Graph().as_default(), tf.compat.v1.device(setter):
        big = tf.compat.v1.get_variable("big", [1000])  # -> task 0
        small = tf.compat.v1.get_variable("small", [10])  # -> task 1
        # An optimizer slot: offered to the strategy, which picks task 1, but
        # TensorFlow puts it beside `big` on task 0.
        with tf.compat.v1.colocate_with(big):
            slot = tf.compat.v1.get_variable("big_slot", [2000])
        after = tf.compat.v1.get_variable("after", [10])
    assert devices([big, small, slot]) == [ps(0), ps(1), ps(0)]
    # Task 0 really holds 12000 bytes and task 1 only 40, so `after` belongs on
    # task 1; charging the slot to task 1 would have sent it to task 0.
    assert after.op.device == ps(1)


@pytest.mark.parametrize(
    "shape, dtype, expected",
    [
        ([10, 3], tf.float32, 120),
        ([7], tf.float64, 56),
        ([2, 3, 4], tf.int64, 192),
        ([], tf.float32, 4),
    ],
)
@pytest.mark.parametrize("use_resource", [True, False], ids=["VarHandleOp", "VariableV2"])
def test_byte_size_load_fn(shape, dtype, expected, use_resource):
    with tf.Graph().as_default():
        var = tf.compat.v1.get_variable("v", shape, dtype=dtype, use_resource=use_resource)
    assert var.op.type == ("VarHandleOp" if use_resource else "VariableV2")
    assert byte_size_load_fn(var.op) == expected
    assert byte_size_load_fn(var.op.node_def) == expected


def test_byte_size_load_fn_rejects_unknown_shape_and_non_variables():
    with tf.Graph().as_default():
        handle = tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=tf.TensorShape(None), name="shapeless")
        const = tf.constant([1.0, 2.0], name="two")
    with pytest.raises(ValueError, match="'shapeless'.*unknown"):
        byte_size_load_fn(handle.op)
    with pytest.raises(ValueError, match="'two'.*not a variable op"):
        byte_size_load_fn(const.op)


def test_random_is_deterministic_and_spreads_over_tasks():
    cluster = make_cluster(num_ps=3)
    sizes = [4] * 12
    _, first, _ = build(device_setter(cluster, "random", seed=7), sizes)
    _, second, _ = build(device_setter(cluster, "random", seed=7), sizes)
    assert devices(first) == devices(second)
    assert set(devices(first)) == {ps(0), ps(1), ps(2)}
    _, reseeded, _ = build(device_setter(cluster, "random", seed=8), sizes)
    assert devices(reseeded) != devices(first)


def test_random_placement_does_not_depend_on_the_process():
    # Pinned values: Python's hash() of a str changes with every process, so a
    # strategy built on it would almost never reproduce them.
    ops = [types.SimpleNamespace(name=f"layer{i}/kernel") for i in range(6)]
    assert [RandomStrategy(3, seed=0)(op) for op in ops] == [1, 2, 0, 2, 1, 2]


def test_partitioner_splits_a_large_variable_over_distinct_ps_tasks():
    cluster = make_cluster(num_ps=3)
    graph = tf.Graph()
    partitioned = tf.compat.v1.variable_scope("embed", partitioner=variable_partitioner(cluster))
    with graph.as_default(), tf.compat.v1.device(device_setter(cluster)), partitioned:
        big = tf.compat.v1.get_variable("big", [1024, 1024])  # 4 MiB of float32
        small = tf.compat.v1.get_variable("small", [10, 10])
    parts = list(big)
    assert [p.shape[0] for p in parts] == [342, 341, 341]
    assert sorted(p.op.device for p in parts) == [ps(0), ps(1), ps(2)]
    assert len(list(small)) == 1


def test_partitioner_never_makes_a_shard_below_min_slice_bytes():
    partitioner = variable_partitioner(make_cluster(num_ps=4), min_slice_bytes=96 << 10)
    # 3 rows of 64 KiB: two shards would leave one of 64 KiB, so it stays whole.
    assert partitioner(shape=tf.TensorShape([3, 16384]), dtype=tf.float32) == [1, 1]
    # 4 MiB in 16 KiB rows: four shards of 1 MiB each.
    assert partitioner(shape=tf.TensorShape([256, 4096]), dtype=tf.float32) == [4, 1]
    # 6 rows of 32 KiB (192 KiB): at most two shards of 96 KiB.
    assert partitioner(shape=tf.TensorShape([6, 8192]), dtype=tf.float32) == [2, 1]


def test_partitioner_is_none_without_several_ps_tasks():
    assert variable_partitioner(make_cluster(num_ps=1)) is None
    assert variable_partitioner(make_cluster(num_ps=0)) is None


def test_no_ps_tasks_puts_everything_on_the_worker():
    for strategy in BUILT_IN_STRATEGIES:
        _, variables, total = build(device_setter(make_cluster(num_ps=0), strategy), [3, 3])
        assert devices(variables) == ["/job:worker/task:1"] * 2
        assert total.op.device == "/job:worker/task:1"


def test_unknown_strategy_is_a_one_line_config_error():
    with pytest.raises(ConfigError) as caught:
        device_setter(make_cluster(num_ps=2), "least_loaded")
    message = str(caught.value)
    assert "'least_loaded'" in message
    assert "round_robin, greedy, random" in message
    assert "\n" not in message
    assert "\n" not in message


def report_graph():
    graph = tf.Graph()
    with graph.as_default():
        with tf.compat.v1.device(ps(0)):
            tf.compat.v1.get_variable("w", [10, 3])  # 120 bytes
            tf.compat.v1.get_variable("step", [], dtype=tf.float64)  # 8 bytes
        with tf.compat.v1.device(ps(1) + "/device:CPU:0"):
            tf.compat.v1.get_variable("ids", [4], dtype=tf.int64, use_resource=False)  # 32 bytes
        with tf.compat.v1.device("/job:worker/task:0"):
            tf.compat.v1.get_variable("local", [5])  # 20 bytes, not on ps
    return graph


def test_report_bytes_and_imbalance():
    report = placement_report(report_graph())
    assert report.variables == (
        ("w", ps(0), 120),
        ("step", ps(0), 8),
        ("ids", ps(1), 32),
        ("local", "/job:worker/task:0", 20),
    )
    # 128 and 32 bytes: mean 80.
    assert report.bytes_per_task == {ps(0): 128, ps(1): 32}
    assert report.imbalance == pytest.approx(128 / 80)

    # A third, empty ps task: mean 160 / 3.
    padded = placement_report(report_graph(), num_ps=3)
    assert padded.bytes_per_task == {ps(0): 128, ps(1): 32, ps(2): 0}
    assert padded.imbalance == pytest.approx(128 / (160 / 3))


def test_report_of_a_graph_without_variables():
    report = placement_report(tf.Graph(), num_ps=2)
    assert report == PlacementReport(variables=(), bytes_per_task={ps(0): 0, ps(1): 0}, imbalance=1.0)


def test_report_includes_partitioned_parts():
    cluster = make_cluster(num_ps=2)
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.device(device_setter(cluster)):
        tf.compat.v1.get_variable("table", [1024, 64], partitioner=variable_partitioner(cluster))
    report = placement_report(graph)
    assert report.variables == (("table/part_0", ps(0), 131072), ("table/part_1", ps(1), 131072))
    assert report.imbalance == 1.0


def test_report_format_and_dict():
    report = placement_report(report_graph())
    lines = report.format().splitlines()
    assert lines[1].split() == [ps(0), "2", "128", "80.0%"]
    assert lines[2].split() == [ps(1), "1", "32", "20.0%"]
    assert lines[3] == "1 variable op(s) not on a ps task: 1 on /job:worker/task:0"
    assert lines[4] == "imbalance (max/mean bytes): 1.60"
    data = json.loads(json.dumps(report.to_dict()))
    assert data["bytes_per_task"] == {ps(0): 128, ps(1): 32}
    assert data["variables"][2] == {"name": "ids", "device": ps(1), "bytes": 32}
    assert data["imbalance"] == pytest.approx(1.6)


def test_log_placement_report_logs_each_line_at_info(caplog):
    report = placement_report(report_graph())
    logger = logging.getLogger("ps_toolkit.test_placement")
    with caplog.at_level(logging.INFO, logger=logger.name):
        log_placement_report(report, logger)
    assert [r.levelno for r in caplog.records] == [logging.INFO] * 5
    assert [r.getMessage() for r in caplog.records] == report.format().splitlines()


def by_name_length(num_ps, seed):
    """A user's strategy: the ps task is the length of the variable's name plus the seed, modulo the ps tasks."""
    return lambda op: (len(op.name) + seed) % num_ps


@pytest.fixture
def registered():
    registry.register_strategy("by_name_length", by_name_length)
    yield "by_name_length"
    registry.STRATEGIES.unregister("by_name_length")


def test_a_users_registered_strategy_places_the_variables(registered):
    cluster = make_cluster(num_ps=3)
    _, variables, _ = build(device_setter(cluster, registered, seed=1), [3, 3, 3, 3])
    # v0..v3: names of length 2, placed at (2 + 1) % 3 = 0; their initial-value ops stay on the worker.
    assert devices(variables) == [ps(0)] * 4
    graph, variables, _ = build(device_setter(cluster, registered, seed=0), [3])
    assert devices(variables) == [ps(2)]
    assert registered in registry.STRATEGIES.names()


def test_a_strategy_function_is_taken_as_it_is_without_a_name():
    _, variables, _ = build(device_setter(make_cluster(num_ps=2), lambda num_ps, seed: lambda op: 1), [3, 3])
    assert devices(variables) == [ps(1), ps(1)]


def test_a_users_strategy_by_name_passes_the_configs_check(registered):
    from ps_toolkit.training.config import TrainConfig

    TrainConfig(placement=registered, checkpoint_dir="/tmp/x").validate(make_cluster(num_ps=2))
    with pytest.raises(ConfigError) as caught:
        TrainConfig(placement="least_loaded", checkpoint_dir="/tmp/x").validate(make_cluster(num_ps=2))
    assert str(caught.value) == (
        "unknown placement strategy 'least_loaded' (from --placement); "
        "registered: round_robin, greedy, random, by_name_length"
    )


def test_a_users_strategy_by_module_and_function_is_loaded_where_the_graph_is_built(tmp_path, monkeypatch):
    from ps_toolkit.training import replica_graph
    from ps_toolkit.training.config import TrainConfig

    (tmp_path / "my_placement.py").write_text("def second_ps(num_ps, seed):\n    return lambda op: 1\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    TrainConfig(placement="my_placement:second_ps", checkpoint_dir="/tmp/x").validate(make_cluster(num_ps=2))
    strategy = replica_graph.placement_strategy("my_placement:second_ps")
    _, variables, _ = build(device_setter(make_cluster(num_ps=2), strategy), [3])
    assert devices(variables) == [ps(1)]
    with pytest.raises(ConfigError, match="my_placement:nope"):
        TrainConfig(placement="my_placement:nope", checkpoint_dir="/tmp/x").validate(make_cluster(num_ps=2))


@pytest.mark.parametrize(
    ("name", "strategy", "words"),
    [("greedy", by_name_length, "built in"), ("", by_name_length, "needs a name"), ("x", 3, "must be a function")],
)
def test_a_bad_registration_is_refused_in_one_line(name, strategy, words):
    with pytest.raises(ValueError, match=words):
        registry.register_strategy(name, strategy)
    assert registry.STRATEGIES.names() == BUILT_IN_STRATEGIES
