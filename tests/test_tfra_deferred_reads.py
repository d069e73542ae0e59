"""A TFRA script's lookups of many tables, made with no model_fn around them, are read together before the graph
runs (compat/tfra/deferred_reads.py): one read per ps, the rows of reads made at once, and never zeros.

In-process: ``install.install()`` serves ``tensorflow_recommenders_addons``; each test builds its own graph.
"""

import os
import sys
import threading

import numpy as np
import pytest
import tensorflow as tf

from ps_toolkit.dynamic_embedding import lookup_batches, shard_reads

CPU = "/cpu:0"
PS = ["/job:ps/task:0", "/job:ps/task:1"]
IDS = [[3, 9, 4], [12, 9, 2**40]]


def _fields(de, count, devices):
    return [de.get_variable(f"field_{i}", dim=4, devices=devices) for i in range(count)]


def _finds(graph) -> int:
    return sum(op.type == "LookupTableFindV2" for op in graph.get_operations())


def test_the_lookups_of_26_tables_are_read_with_one_find_per_ps_when_the_graph_finalizes(de):
    with tf.Graph().as_default() as graph:
        variables = _fields(de, 26, PS)
        ids = tf.constant(IDS, tf.int64)
        for field, variable in enumerate(variables):
            de.embedding_lookup(variable, ids[:, field % 3], name=f"field_{field}")
        assert _finds(graph) == 0  # not read yet
        graph.finalize()
        assert _finds(graph) == 2


def test_deferred_rows_train_as_rows_read_at_once(de):
    def train(defer: bool):
        with tf.Graph().as_default() as graph:
            step = tf.compat.v1.train.get_or_create_global_step()
            variables = _fields(de, 3, [CPU, CPU])
            ids = tf.compat.v1.placeholder(tf.int64, [2, 3])
            if defer:
                rows = [de.embedding_lookup(v, ids[:, f]) for f, v in enumerate(variables)]
            else:  # a lookup under a control dependency is read at once
                with tf.control_dependencies([tf.no_op()]):
                    rows = [de.embedding_lookup(v, ids[:, f]) for f, v in enumerate(variables)]
            loss = tf.add_n([tf.reduce_sum(tf.square(r - 0.5)) for r in rows])
            optimizer = de.DynamicEmbeddingOptimizer(tf.compat.v1.train.AdamOptimizer(0.1))
            train_op = optimizer.minimize(loss, global_step=step)
            with tf.compat.v1.Session(graph=graph) as session:
                session.run(tf.compat.v1.global_variables_initializer())
                for offset in range(3):
                    session.run(train_op, {ids: np.array(IDS) + offset})
                finds = _finds(graph)
                return session.run(rows, {ids: IDS}), finds

    (deferred, deferred_finds), (at_once, at_once_finds) = train(True), train(False)
    for got, want in zip(deferred, at_once, strict=True):
        np.testing.assert_array_equal(got, want)
    assert deferred_finds < at_once_finds


def test_a_train_step_needs_no_feed_of_the_evaluation_lookups(de):
    with tf.Graph().as_default() as graph:
        (variable,) = _fields(de, 1, [CPU, CPU])
        train_ids = tf.data.Dataset.from_tensors(tf.constant(IDS[0], tf.int64)).repeat()
        train_ids = tf.compat.v1.data.make_one_shot_iterator(train_ids).get_next()
        eval_ids = tf.compat.v1.placeholder(tf.int64, [None])
        train_rows = de.embedding_lookup(variable, train_ids)
        eval_rows = de.embedding_lookup(variable, eval_ids)
        with tf.compat.v1.Session(graph=graph) as session:
            trained = session.run(train_rows)  # the evaluation's placeholder is not fed
            evaluated = session.run(eval_rows, {eval_ids: IDS[0]})
    np.testing.assert_array_equal(trained, evaluated)


def test_a_graph_run_by_a_route_that_reads_nothing_fails_naming_the_table(de):
    with tf.Graph().as_default() as graph:
        (variable,) = _fields(de, 1, [CPU])
        rows = de.embedding_lookup(variable, tf.constant(IDS[0], tf.int64))
        graph_def = graph.as_graph_def()  # exported before any run: its stand-in was never read
    with tf.Graph().as_default() as copy:
        (copied,) = tf.compat.v1.import_graph_def(graph_def, return_elements=[rows.name], name="")
        never_read = pytest.raises(tf.errors.InvalidArgumentError, match="dynamic table .*field_0.* was never read")
        with tf.compat.v1.Session(graph=copy) as session, never_read:
            session.run(copied)


@pytest.mark.parametrize("where", ["v2 cond", "v2 while_loop", "tf.function"])
def test_a_lookup_in_a_functions_graph_is_read_at_once(de, where):
    was_v2 = tf.compat.v1.control_flow_v2_enabled()
    tf.compat.v1.enable_control_flow_v2()  # as after only disable_eager_execution()
    try:
        with tf.Graph().as_default() as graph:
            variable = de.get_variable("field_0", dim=4, devices=[CPU], initializer=1.0)
            ids = tf.constant(IDS[0], tf.int64)
            if where == "v2 cond":
                read = lambda: de.embedding_lookup(variable, ids)  # noqa: E731
                rows = tf.compat.v1.cond(tf.constant(True), read, lambda: tf.zeros([3, 4]))
            elif where == "v2 while_loop":
                body = lambda i, total: (i + 1, total + de.embedding_lookup(variable, ids))  # noqa: E731
                rows = tf.while_loop(lambda i, _: i < 1, body, (0, tf.zeros([3, 4])))[1]
            else:
                rows = tf.function(lambda x: de.embedding_lookup(variable, x))(ids)
            with tf.compat.v1.Session(graph=graph) as session:
                np.testing.assert_array_equal(session.run(rows), np.ones([3, 4]))
    finally:
        if not was_v2:
            tf.compat.v1.disable_control_flow_v2()


class _SeenLock:
    """A lock that tells when a thread other than the one holding it comes to take it."""

    def __init__(self):
        self._lock, self.other_came = threading.Lock(), threading.Event()
        self.holder = None

    def __enter__(self):
        if self.holder is not None and self.holder != threading.get_ident():
            self.other_came.set()
        self._lock.acquire()
        self.holder = threading.get_ident()

    def __exit__(self, *exc):
        self.holder = None
        self._lock.release()


def test_a_run_in_another_thread_waits_for_a_read_under_way(de, monkeypatch):
    lock = _SeenLock()
    monkeypatch.setattr(lookup_batches, "_READ_LOCK", lock)
    read_together, runs, runners = shard_reads.read_together, [], []
    with tf.Graph().as_default() as graph:
        variable = de.get_variable("field_0", dim=4, devices=[CPU], initializer=1.0)
        rows = de.embedding_lookup(variable, tf.constant(IDS[0], tf.int64))
        other = tf.constant(1.0) + 1
        session = tf.compat.v1.Session(graph=graph)

        def read_while_another_thread_runs(*args):
            # A queue runner's thread runs the graph while this thread's run is reading the lookups.
            runner = threading.Thread(target=lambda: runs.append(session.run(other)))
            runner.start()
            runners.append(runner)
            assert lock.other_came.wait(60), "the other thread's run did not wait for the read"
            return read_together(*args)

        monkeypatch.setattr(shard_reads, "read_together", read_while_another_thread_runs)
        with session:
            got = session.run(rows)  # an unread graph, once run, is what the session keeps
            runners[0].join(60)
    np.testing.assert_array_equal(got, np.ones([3, 4]))
    assert runs == [2.0]


def test_a_first_lookup_made_inside_its_own_session_run_call_is_read():
    # In a fresh process: ``sess.run`` is bound before its argument makes the process's first lookup.
    from fixtures_legacy.launch import RUN_LEGACY
    from taskrun import run_script

    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures_legacy", "tfra_first_lookup_run.py")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = run_script([sys.executable, RUN_LEGACY, script], timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "[[0.5, 0.5], [0.5, 0.5]]"
