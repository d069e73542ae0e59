"""A dynamic table without max_rows_per_shard is bounded by default from the ps's memory (row_bounds, ps_memory).

Graphs run in a plain tf.compat.v1.Session on the CPU; the memory a shard counts is set with
PS_TOOLKIT_PS_MEMORY_MB, so that a few thousand ids pass the bound.
"""

from __future__ import annotations

import logging

import pytest
import tensorflow as tf

from ps_toolkit import dynamic_embedding as de
from ps_toolkit.base.errors import ConfigError
from ps_toolkit.dynamic_embedding import ps_memory, row_bounds

CPU = "/cpu:0"
TF1 = tf.compat.v1.train
# dim 2 float32 with Adagrad: rows (16 + 8) + meta (16 + 16) + accumulator (16 + 8), each x 2.5 buckets.
BYTES_A_ROW = 200
ONE_MB_ROWS = int((1 << 20) * row_bounds.MEMORY_SHARE // BYTES_A_ROW)  # 2,097


def _trainer(shards=1, key_dtype=tf.int64, **table_args):
    """(session, train(ids), hook, table): a table trained by Adagrad and its maintenance hook, begun."""
    graph = tf.Graph()
    with graph.as_default():
        step = TF1.get_or_create_global_step()
        table = de.get_table("t", 2, key_dtype=key_dtype, devices=[CPU] * shards, **table_args)
        ids = tf.compat.v1.placeholder(key_dtype, [None])
        loss = tf.reduce_sum(tf.square(de.lookup(table, ids)))
        train = de.TableOptimizer(TF1.AdagradOptimizer(0.1)).minimize(loss, global_step=step)
        hook = de.TableMaintenanceHook([table], every_steps=1)
        hook.begin()
        init = tf.compat.v1.global_variables_initializer()
    session = tf.compat.v1.Session(graph=graph)
    session.run(init)
    return session, lambda batch: session.run(train, {ids: batch}), hook, table


@pytest.fixture
def one_mb(monkeypatch):
    monkeypatch.setenv(ps_memory.MEMORY_ENV, "1")


def _bound_lines(caplog):
    return [r.getMessage() for r in caplog.records if "rows per shard" in r.getMessage() or "bound" in r.getMessage()]


def test_bytes_a_row_counts_rows_meta_and_slots():
    _, _, _, table = _trainer()
    assert row_bounds.bytes_a_row(table) == BYTES_A_ROW


def test_a_table_without_max_rows_per_shard_is_bounded_by_default_and_the_bound_is_stated(one_mb, caplog):
    session, train, hook, _ = _trainer()
    with caplog.at_level(logging.INFO, logger="ps_toolkit.dynamic_embedding.maintenance"):
        hook.after_create_session(session, None)
        train(list(range(3000)))
        hook.maintain(session)
    record = hook.result()["t"]
    assert record["bound"] == "default" and record["max_rows_per_shard"] == [ONE_MB_ROWS]
    assert (record["rows_before_eviction"], record["rows"]) == (3000, ONE_MB_ROWS)
    assert record["evicted"] == 3000 - ONE_MB_ROWS
    stated = [line for line in _bound_lines(caplog) if "rows per shard by default" in line]
    assert len(stated) == 1, stated  # said once, not at every maintenance
    assert f"at most {ONE_MB_ROWS:,} rows per shard by default (40% of this process's 1 MB" in stated[0]


def test_a_string_keyed_table_is_bounded_by_its_own_bytes_a_row(one_mb):
    session, train, hook, table = _trainer(key_dtype=tf.string)
    per_row = 3 * row_bounds.STRING_ENTRY_BYTES + 8 + 16 + 8  # rows, meta, accumulator: an entry each
    assert row_bounds.bytes_a_row(table) == per_row
    hook.after_create_session(session, None)
    train([f"id-{i}" for i in range(2000)])
    hook.maintain(session)
    record = hook.result()["t"]
    bound = int((1 << 20) * row_bounds.MEMORY_SHARE // per_row)
    assert (record["max_rows_per_shard"], record["rows"], record["evicted"]) == ([bound], bound, 2000 - bound)


def test_the_most_recently_seen_ids_stay_under_the_default_bound(one_mb):
    session, train, hook, table = _trainer()
    hook.after_create_session(session, None)
    train(list(range(2500)))
    train(list(range(2500, 2600)))  # seen last: kept
    hook.maintain(session)
    with session.graph.as_default():
        ids, _ = de.table_ops.export(table)
    left = set(session.run(ids))
    assert len(left) == ONE_MB_ROWS and set(range(2500, 2600)) <= left


def test_a_shard_past_a_share_of_its_default_bound_warns_once_per_share(one_mb, caplog):
    session, train, hook, _ = _trainer()
    hook.after_create_session(session, None)
    with caplog.at_level(logging.WARNING, logger="ps_toolkit.dynamic_embedding.maintenance"):
        train(list(range(1000)))
        hook.maintain(session)  # 48%: nothing
        assert not caplog.records
        train(list(range(1000, 1800)))
        hook.maintain(session)  # 86%
        train(list(range(1800, 1900)))
        hook.maintain(session)  # 91%: already said
        warned = [r.getMessage() for r in caplog.records]
        assert len(warned) == 1 and "holds 1,800 rows and passed 80% of its default bound of 2,097" in warned[0]
        train(list(range(1900, 2500)))
        hook.maintain(session)  # past the bound: evicted down to it, said once
        train(list(range(2500, 3000)))
        hook.maintain(session)
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2, warned
    assert "holds 2,500 rows and reached its default bound of 2,097" in warned[1]
    assert all(r.levelno == logging.WARNING and "\n" not in r.getMessage() for r in caplog.records)


def test_an_explicit_max_rows_per_shard_wins_over_the_default(one_mb, caplog):
    session, train, hook, _ = _trainer(shards=2, max_rows_per_shard=50)
    with caplog.at_level(logging.INFO):
        hook.after_create_session(session, None)
        train(list(range(3000)))
        hook.maintain(session)
    record = hook.result()["t"]
    assert record["bound"] == "max_rows_per_shard" and record["max_rows_per_shard"] == [50, 50]
    assert record["rows_per_shard"] == [50, 50]
    assert any("at most 50 rows per shard (max_rows_per_shard)" in m for m in _bound_lines(caplog))
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # the user's bound: no warning


def test_max_rows_per_shard_0_is_no_bound(one_mb, caplog):
    session, train, hook, _ = _trainer(max_rows_per_shard=de.UNBOUNDED)
    with caplog.at_level(logging.INFO):
        hook.after_create_session(session, None)
        train(list(range(3000)))
        hook.maintain(session)
    record = hook.result()["t"]
    assert (record["bound"], record["max_rows_per_shard"], record["rows"]) == ("none", [None], 3000)
    assert any("no bound on its rows (max_rows_per_shard=0)" in m for m in _bound_lines(caplog))


def test_the_measures_carry_bytes_per_shard(one_mb):
    session, train, hook, _ = _trainer(shards=2)
    hook.after_create_session(session, None)
    train(list(range(100)))
    hook.maintain(session)
    record = hook.result()["t"]
    assert sum(record["rows_per_shard"]) == 100
    assert record["bytes_per_shard"] == [rows * BYTES_A_ROW for rows in record["rows_per_shard"]]


def test_tables_with_bounds_of_their_own_take_their_bytes_first():
    graph = tf.Graph()
    with graph.as_default():
        given = de.get_table("given", 2, devices=["/job:ps/task:0"], max_rows_per_shard=1000)
        free = de.get_table("free", 2, devices=["/job:ps/task:0", "/job:ps/task:1"])
        none = de.get_table("none", 2, devices=["/job:ps/task:1"], max_rows_per_shard=0)
    per_row = row_bounds.bytes_a_row(free)  # no optimizer: rows and meta, 140 bytes
    memory = {"/job:ps/task:0": 10 << 20, "/job:ps/task:1": 0}  # ps:1 has not said its memory yet
    found = row_bounds.bounds([given, free, none], memory)
    share = (10 << 20) * row_bounds.MEMORY_SHARE
    assert found["free"].rows == (int((share - 1000 * per_row) // per_row), None)
    assert found["given"] == row_bounds.Bound((1000,), "max_rows_per_shard")
    assert found["none"] == row_bounds.Bound((None,), "none")


def test_a_ps_publishes_its_memory_where_the_maintenance_reads_it():
    graph = tf.Graph()
    with graph.as_default():
        read = ps_memory.read(CPU)
        publish = ps_memory.publish_op(CPU, 12345)
    with tf.compat.v1.Session(graph=graph) as session:
        assert session.run(read) == 0  # not said yet: unknown
        session.run(publish)
        assert session.run(read) == 12345
    assert ps_memory.publishes("/job:ps/task:3") and not ps_memory.publishes(CPU) and not ps_memory.publishes(None)


def test_the_ps_on_one_host_share_its_memory(monkeypatch):
    monkeypatch.delenv(ps_memory.MEMORY_ENV, raising=False)
    alone = ps_memory.memory_of_this_host()
    shared = ps_memory.memory_of_this_host(["localhost:1", "localhost:2", "other:3"], 1)
    assert alone > 0 and shared == alone // 2
    assert ps_memory.memory_of_this_host(environ={ps_memory.MEMORY_ENV: "64"}) == 64 << 20


@pytest.mark.parametrize("text", ["0", "-5", "1.5", "lots", "\u00b2", "99999999999999"])
def test_a_bad_memory_figure_is_one_line(text):
    with pytest.raises(ConfigError, match=rf"^PS_TOOLKIT_PS_MEMORY_MB='{text}': must be a whole number of MB"):
        ps_memory.memory_of_this_host(environ={ps_memory.MEMORY_ENV: text})


def test_a_negative_max_rows_per_shard_is_refused_naming_0():
    with tf.Graph().as_default(), pytest.raises(ConfigError, match=r"max_rows_per_shard=-1 .*or 0 for no bound"):
        de.get_table("t", 2, max_rows_per_shard=-1)


def test_a_max_rows_per_shard_beyond_int64_is_one_line():
    with tf.Graph().as_default(), pytest.raises(ConfigError, match=r"max_rows_per_shard=\d+ must be at most 9223"):
        de.get_table("t", 2, max_rows_per_shard=10**20)


def test_a_shard_past_both_shares_at_once_says_only_the_bound_reached(one_mb, caplog):
    session, train, hook, _ = _trainer()
    hook.after_create_session(session, None)
    with caplog.at_level(logging.WARNING, logger="ps_toolkit.dynamic_embedding.maintenance"):
        train(list(range(3000)))
        hook.maintain(session)
        train(list(range(3000, 6000)))
        hook.maintain(session)
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "holds 3,000 rows and reached its default bound" in warned[0], warned
