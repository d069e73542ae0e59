"""A model_fn's lookups of many tables read together: one read per group shard, the rows and training unchanged."""

import numpy as np
import tensorflow as tf

from ps_toolkit import dynamic_embedding as de
from ps_toolkit.dynamic_embedding.lookup_batches import batched_lookups

CPU = "/cpu:0"
PS = ["/job:ps/task:0", "/job:ps/task:1"]
IDS = [[3, 9, 3, -7], [12, 9, 2**40, 5]]


def _finds(graph) -> list:
    return [op for op in graph.get_operations() if op.type == "LookupTableFindV2"]


def _field_tables(count: int, devices, **table_args) -> list:
    return [de.get_table(f"field_{i}", 4, devices=devices, **table_args) for i in range(count)]


def _lookups(tables, ids, batched: bool) -> list:
    if not batched:
        return [de.lookup(table, ids) for table in tables]
    with batched_lookups():
        return [de.lookup(table, ids) for table in tables]


def test_the_lookups_of_any_number_of_tables_read_each_shard_once_and_train_in_one_update_per_shard():
    finds = {}
    for count in (2, 26):
        with tf.Graph().as_default() as graph:
            tables = _field_tables(count, PS)
            ids = tf.constant(IDS, tf.int64)
            rows = _lookups(tables, ids, batched=True)
            looked_up = len(_finds(graph))
            loss = tf.add_n([tf.reduce_sum(r) for r in rows])
            de.TableOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1)).minimize(loss)
            finds[count] = (looked_up, len(_finds(graph)))
            assert {op.device for op in _finds(graph)} == set(PS)
    # One read of the rows per ps; the update reads each shard's meta, rows and admission counters once.
    assert finds[2] == finds[26] == (2, 8), finds


def test_batched_rows_and_their_training_are_the_unbatched_ones():
    def train(batched: bool):
        with tf.Graph().as_default() as graph:
            step = tf.compat.v1.train.get_or_create_global_step()
            tables = _field_tables(3, [CPU, CPU], initializer=de.InitialRows("uniform", 0.3, seed=5))
            tables.append(de.get_table("wide", 6, devices=[CPU, CPU]))  # another dim: another group
            tables.append(de.get_table("admitted_late", 4, devices=[CPU, CPU], admit_after=2))
            ids = tf.compat.v1.placeholder(tf.int64, [2, 4])
            # The first table looked up twice; the last one alone in its group, twice.
            rows = _lookups([*tables, tables[0], tables[-1]], ids, batched)
            loss = tf.add_n([tf.reduce_sum(tf.square(r - 0.1 * k)) for k, r in enumerate(rows)])
            optimizer = de.TableOptimizer(tf.compat.v1.train.AdagradOptimizer(0.2))
            train_op = optimizer.minimize(loss, global_step=step)
            with tf.compat.v1.Session(graph=graph) as session:
                session.run(tf.compat.v1.global_variables_initializer())
                before = session.run(rows, {ids: IDS})
                for offset in range(4):
                    session.run(train_op, {ids: np.array(IDS) + offset})
                return before, session.run(rows, {ids: IDS})

    batched, unbatched = train(True), train(False)
    for got, want in zip(batched, unbatched, strict=True):
        for got_rows, want_rows in zip(got, want, strict=True):
            np.testing.assert_array_equal(got_rows, want_rows)
    before, after = batched
    assert not np.allclose(before[0], after[0])  # it trained


def test_a_lookup_in_a_cond_of_the_block_is_read_at_once_and_reads_the_same_rows():
    with tf.Graph().as_default() as graph:
        (table,) = _field_tables(1, [CPU, CPU])
        ids = tf.constant(IDS, tf.int64)
        take = tf.compat.v1.placeholder_with_default(True, [])
        with batched_lookups():
            plain = de.lookup(table, ids)
            in_cond = tf.compat.v1.cond(take, lambda: de.lookup(table, ids), lambda: tf.zeros([2, 4, 4]))
        with tf.compat.v1.Session(graph=graph) as session:
            plain_rows, cond_rows = session.run([plain, in_cond])
    np.testing.assert_array_equal(plain_rows, cond_rows)
    assert np.any(plain_rows != 0)


def test_a_block_ended_by_an_error_leaves_nothing_pending_for_the_next():
    with tf.Graph().as_default() as graph:
        (table,) = _field_tables(1, [CPU])
        ids = tf.constant(IDS, tf.int64)
        try:
            with batched_lookups():
                de.lookup(table, ids)
                raise RuntimeError("the model_fn failed")
        except RuntimeError:
            pass
        with batched_lookups():
            rows = de.lookup(table, ids)
        with tf.compat.v1.Session(graph=graph) as session:
            np.testing.assert_array_equal(session.run(rows), session.run(de.lookup(table, ids)))


def test_a_lookup_whose_ids_use_another_lookups_rows_is_read_after_it():
    with tf.Graph().as_default() as graph:
        first, second = _field_tables(2, [CPU, CPU], initializer=de.InitialRows("uniform", 0.3, seed=5))
        ids = tf.constant(IDS, tf.int64)
        with batched_lookups():
            rows = de.lookup(first, ids)
            # Ids made from the first lookup's rows (data), and ids made only after them (control).
            from_rows = ids + tf.cast(tf.reduce_sum(rows) > 1e9, tf.int64)
            with tf.control_dependencies([rows]):
                after_rows = tf.identity(ids)
            later = [de.lookup(second, from_rows), de.lookup(second, after_rows)]
        with tf.compat.v1.Session(graph=graph) as session:  # one read for them all would be its own input
            got = session.run(later)
            want = session.run(de.lookup(second, ids))
    for rows_read in got:
        np.testing.assert_array_equal(rows_read, want)
    assert np.any(want != 0)
