"""Drills on a model with dynamic tables: a ps holding table shards, a worker and the chief killed mid-run.

Real processes (LocalCluster: 2 ps + 2 workers, the dynamic_clicks model,
no eviction). ps:1 is killed (SIGKILL) and started again on its port with
empty tables. The chief must restore the newest checkpoint (the tables'
"filled" markers make the model not ready until it does), so after the
restart ps:1's shard of each table holds every id of that checkpoint's
buckets for the shard (training only adds ids here), and the job ends with
every task exit 0; each replica's input starts again at the restored global
step (``ps_toolkit.batch_indices``), so no batch the restored model trained on
is read again. A killed worker, then a killed chief,
restarted, rejoin and the chief keeps the tables the ps still hold (no restore),
as for dense variables.
"""

import collections
import os
import time

import pytest
import tensorflow as tf

from ps_toolkit import dynamic_embedding
from ps_toolkit.cluster.preflight import reachable
from ps_toolkit.dynamic_embedding import keys, shard_records
from ps_toolkit.launch.local_cluster import LocalCluster
from tests import logwatch

pytestmark = pytest.mark.slow
EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "dynamic_clicks")
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
BATCH_LINE = "trained batch "  # clicks_batch_log's line per trained batch
TABLES = ("model/user", "model/item")


def _checkpoint_ids(checkpoint: str, table: str, shard: int, num_shards: int) -> set:
    """The ids the checkpoint holds rows for in the buckets of ``shard``."""
    reader = tf.train.load_checkpoint(checkpoint)
    ids = set()
    for bucket in keys.buckets_of_shard(shard, num_shards):
        ids.update(reader.get_tensor(f"{table}/rows/bucket_{bucket:02d}/keys").tolist())
    return ids


def _live_ids(address: str, table: str, shard: int, num_shards: int) -> set:
    """The ids whose rows the running ps ``shard`` holds now (read by a session on that ps)."""
    graph = tf.Graph()
    scope, name = table.rsplit("/", 1)
    devices = [f"/job:ps/task:{i}" for i in range(num_shards)]
    with graph.as_default(), tf.compat.v1.variable_scope(scope):
        # The example's table as its model makes it (dim 8, normal initial rows, admitted at once): the
        # same group, so the same hash tables on the ps; only this table's entries of the shard are read.
        made = dynamic_embedding.get_table(
            name, 8, initializer=dynamic_embedding.InitialRows("normal"), devices=devices
        )
        group_shard = made.shards[shard]
        found = shard_records.entries(group_shard, group_shard.rows)
        stored, _ = shard_records.of_table(found, group_shard.group.tables.index(made))
        ids = keys.ids_of(tf.int64, stored)
    # Only the ops the ids need, in a graph of their own: the group also made the other shards' tables,
    # on ps that a session to this one ps cannot place ops on.
    needed = tf.compat.v1.graph_util.extract_sub_graph(graph.as_graph_def(), [ids.op.name])
    with tf.Graph().as_default() as pruned:
        (pruned_ids,) = tf.compat.v1.import_graph_def(needed, return_elements=[ids.name], name="")
        with tf.compat.v1.Session(f"grpc://{address}", graph=pruned) as session:
            return set(session.run(pruned_ids).tolist())


# Enough steps that the chief is still training at a kill, however long its own start took:
# worker 1 may train alone at a hundred steps/s or more meanwhile.
STEPS = 6000


def _trained_batches(log_path: str) -> list[int]:
    """The batch indices a replica trained, in order (clicks_batch_log's lines)."""
    lines = logwatch.read_log(log_path).splitlines()
    return [int(line[len(BATCH_LINE) :]) for line in lines if line.startswith(BATCH_LINE)]


def _cluster(tmp_path, checkpoint_dir: str, *extra_args: str) -> LocalCluster:
    """The drills' cluster; ``extra_args`` come last (a flag given twice takes the later value)."""
    args = [
        "--model_fn=clicks_batch_log:model_fn",
        "--input_fn=clicks_batch_log:input_fn",
        "--optimizer=adagrad",
        "--learning_rate=0.5",
        "--batch_size=64",
        f"--train_steps={STEPS}",
        f"--checkpoint_dir={checkpoint_dir}",
        "--save_checkpoint_steps=40",
        "--watchdog_secs=60",
        "--ps_orphan_timeout_secs=30",
        *extra_args,
    ]
    env = {"PYTHONPATH": os.pathsep.join([EXAMPLE, FIXTURES])}
    return LocalCluster(num_ps=2, num_workers=2, train_args=args, log_dir=str(tmp_path / "logs"), env=env)


def test_a_killed_worker_and_a_killed_chief_rejoin_and_the_tables_are_kept(tmp_path):
    with _cluster(tmp_path, str(tmp_path / "ckpt")) as local:
        chief = local.log_path("worker", 0)
        before = logwatch.wait_for_step(chief, 150, timeout=300)
        assert before["global_step"] < STEPS - 3000, f"training nearly over before the kills: {before}"
        local.kill("worker", 1)
        local.restart("worker", 1)
        logwatch.wait_for_step(local.log_path("worker", 1), 1, timeout=120, after_time=time.time())
        local.kill("worker", 0)
        local.restart("worker", 0)
        restarted_at = time.time()
        after = logwatch.wait_for_step(chief, 1, timeout=120, after_time=restarted_at)
        kept = logwatch.read_log(chief)
        assert "parameter servers still hold the model" in kept, kept[-2000:]
        assert after["global_step"] >= before["global_step"], (before, after)
        codes = local.wait(["worker", "ps"], timeout_secs=300)
        assert set(codes.values()) == {0}, codes


def test_a_restarted_ps_gets_its_table_shards_back_from_the_checkpoint(tmp_path):
    steps = STEPS
    checkpoint_dir = str(tmp_path / "ckpt")
    with _cluster(tmp_path, checkpoint_dir) as local:
        chief = local.log_path("worker", 0)
        before = logwatch.wait_for_step(chief, 150, timeout=300)
        assert before["global_step"] < steps - 2000, f"training nearly over before the kill: {before}"
        local.kill("ps", 1)
        # The chief's session fails with ps:1 gone: no checkpoint is written until it restored one.
        restored = tf.train.latest_checkpoint(checkpoint_dir)
        # Read now: once the chief restored it and trains on, newer saves rotate it away (max_to_keep).
        saved_ids = {table: _checkpoint_ids(restored, table, 1, 2) for table in TABLES}
        local.restart("ps", 1)
        address = local.addresses["ps:1"]
        logwatch.wait_until(lambda: reachable(address), 60, f"ps:1 serving at {address}")
        restarted_at = time.time()
        restored_step = int(restored.rsplit("-", 1)[1])
        logwatch.wait_for_step(chief, restored_step + 20, timeout=180, after_time=restarted_at)
        for table in TABLES:
            saved = saved_ids[table]
            live = _live_ids(address, table, 1, 2)
            assert saved, f"{restored} holds no {table} rows for shard 1"
            missing = saved - live
            assert not missing, f"{len(missing)} of {len(saved)} ids of {restored} not on the restarted ps:1 ({table})"
        codes = local.wait(["worker", "ps"], timeout_secs=300)
        assert set(codes.values()) == {0}, codes
        assert local.restarts["ps:1"] == 1
        for replica in range(2):
            # Batches the restored checkpoint trained on (all below its step): read once. Those after it: again,
            # once at most (an interval).
            trained = _trained_batches(local.log_path("worker", replica))
            assert max(trained) > restored_step, (replica, restored_step, trained[-5:])
            counts = collections.Counter(trained)
            again = sorted(i for i, count in counts.items() if i < restored_step and count > 1)
            assert not again, (
                f"worker {replica} read {len(again)} batches below the restored step {restored_step} again"
            )
            redone = sum(1 for count in counts.values() if count > 1)
            print(f"worker {replica}: {len(trained)} batches, {redone} read twice; restored step {restored_step}")
