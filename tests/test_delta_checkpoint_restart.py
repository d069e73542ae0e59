"""A drill on delta checkpoints: the chief and a ps holding table shards killed between two deltas.

Real processes (LocalCluster: 2 ps + 2 workers, the dynamic_clicks model, no eviction), whole
checkpoints every 1000 global steps and deltas every 30. Once a delta builds on the newest whole
checkpoint, past step 0, the chief is killed (SIGKILL: no save after it), then ps:1, and both are started again.
The restarted chief must restore the whole checkpoint merged with the newest delta: ps:1's shard of
each table then holds every row of that delta's state (the whole checkpoint's kept rows and the
delta's changed ones), the global step resumes from the delta's, and every task exits 0.
"""

import os
import time

import pytest
import tensorflow as tf

from ps_toolkit.cluster.preflight import reachable
from ps_toolkit.dynamic_embedding import delta_files, keys
from tests import logwatch
from tests.test_dynamic_embedding_ps_restart import STEPS, TABLES, _cluster, _live_ids

pytestmark = pytest.mark.slow


def _ids(reader, table: str, component: str, shard: int, num_shards: int) -> set:
    """The ids of one component of ``table`` that checkpoint ``reader`` holds in the buckets of ``shard``."""
    ids = set()
    for bucket in keys.buckets_of_shard(shard, num_shards):
        ids.update(reader.get_tensor(f"{table}/{component}/bucket_{bucket:02d}/keys").tolist())
    return ids


def _rows_of_newest_delta(checkpoint_dir: str, table: str, shard: int, num_shards: int) -> set:
    """The ids with rows in whole + newest delta, in the buckets of ``shard``."""
    state = delta_files.read_state(checkpoint_dir)
    base = tf.train.load_checkpoint(os.path.join(checkpoint_dir, state.base))
    delta = tf.train.load_checkpoint(os.path.join(checkpoint_dir, state.delta))
    kept = _ids(delta, table, "kept", shard, num_shards) & _ids(base, table, "rows", shard, num_shards)
    return kept | _ids(delta, table, "rows", shard, num_shards)


def test_a_restarted_chief_and_ps_get_every_row_of_the_newest_delta_back(tmp_path):
    checkpoint_dir = str(tmp_path / "ckpt")
    deltas = ("--save_checkpoint_steps=1000", "--delta_checkpoint_steps=30")
    with _cluster(tmp_path, checkpoint_dir, *deltas) as local:
        chief = local.log_path("worker", 0)

        def delta_of_the_newest_whole():
            state = delta_files.read_state(checkpoint_dir)
            newest = tf.train.latest_checkpoint(checkpoint_dir)
            past_step_0 = state is not None and state.base_step > 0 and state.global_step > state.base_step + 30
            return past_step_0 and newest is not None and os.path.basename(newest) == state.base

        logwatch.wait_until(delta_of_the_newest_whole, 300, "a delta of the newest whole checkpoint, past step 0")
        local.kill("worker", 0)
        state = delta_files.read_state(checkpoint_dir)
        # A whole checkpoint saved between the check and the kill would be restored alone (it is newer).
        assert os.path.basename(tf.train.latest_checkpoint(checkpoint_dir)) == state.base, state
        assert state.global_step < STEPS - 2000, f"training nearly over before the kills: {state}"
        expected = {table: _rows_of_newest_delta(checkpoint_dir, table, 1, 2) for table in TABLES}
        local.kill("ps", 1)
        local.restart("ps", 1)
        address = local.addresses["ps:1"]
        logwatch.wait_until(lambda: reachable(address), 60, f"ps:1 serving at {address}")
        restarted_at = time.time()
        local.restart("worker", 0)
        first = logwatch.wait_for_step(chief, 1, timeout=180, after_time=restarted_at)
        log = logwatch.read_log(chief)
        assert f"restored delta checkpoint {state.delta}" in log, log[-3000:]
        assert first["global_step"] >= state.global_step, (first, state)
        for table in TABLES:
            live = _live_ids(address, table, 1, 2)
            assert expected[table], f"{state.delta} holds no {table} rows for shard 1"
            missing = expected[table] - live
            assert not missing, f"{len(missing)} of {len(expected[table])} rows of {state.delta} not on ps:1 ({table})"
        codes = local.wait(["worker", "ps"], timeout_secs=300)
        assert set(codes.values()) == {0}, codes
