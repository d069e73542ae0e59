"""Sync replicas' arithmetic on an in-process cluster, values worked out by hand.

Modelled on TensorFlow's own sync_replicas_optimizer_test.py: one graph and one
session per simulated worker, servers in this process, gradients fixed so the
expected variables can be computed on paper.
"""

import threading

import numpy as np
import pytest
import tensorflow as tf

from ps_toolkit.launch.local_cluster import InProcessCluster
from ps_toolkit.placement import strategies
from ps_toolkit.training import multi_step
from ps_toolkit.training.sync_hooks import SyncReplicasHook
from ps_toolkit.training.sync_replicas import PerReplicaSyncOptimizer

LEARNING_RATE = 2.0
# Per worker: (gradient of var0, gradient of var1).
GRADIENTS = [([0.1, 0.1], [0.2]), ([0.9, 0.9], [1.0]), ([0.5, 0.5], [0.3])]


def build_replica(cluster, index, replicas_to_aggregate, make_train, last_step=None):
    """Worker ``index``'s session and ``make_train(optimizer, global_step, var0, var1)``'s result, in its graph."""
    config = cluster.cluster_config("worker", index)
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.device(strategies.device_setter(config)):
        global_step = tf.compat.v1.train.get_or_create_global_step()
        var0 = tf.compat.v1.get_variable("var0", initializer=[0.0, 1.0])
        var1 = tf.compat.v1.get_variable("var1", initializer=[2.0])
        optimizer = PerReplicaSyncOptimizer(
            tf.compat.v1.train.GradientDescentOptimizer(LEARNING_RATE),
            replicas_to_aggregate=replicas_to_aggregate,
            total_num_replicas=config.num_replicas,
            replica_index=config.replica_index,
            last_step=last_step,
        )
        train = make_train(optimizer, global_step, var0, var1)
        # The toolkit's hook: TF's own closes the shared token queue at session end.
        hook = SyncReplicasHook(optimizer, config.is_chief, num_tokens=0)
        session = tf.compat.v1.train.MonitoredTrainingSession(
            master=cluster.targets["worker"][index],
            is_chief=config.is_chief,
            hooks=[hook],
            config=tf.compat.v1.ConfigProto(device_filters=["/job:ps", config.device]),
            stop_grace_period_secs=1,
        )
    return session, train, (global_step, var0, var1)


def build_worker(cluster, index, replicas_to_aggregate):
    """Worker ``index`` with TensorFlow's one-step sync train op."""

    def make_train(optimizer, global_step, var0, var1):
        grad0, grad1 = (tf.constant(g) for g in GRADIENTS[index])
        return optimizer.apply_gradients([(grad0, var0), (grad1, var1)], global_step=global_step)

    return build_replica(cluster, index, replicas_to_aggregate, make_train)


def run_concurrently(steps):
    """Runs one train step per (session, op), each in its own thread, with a bound."""
    errors = []

    def step(session, op):
        try:
            session.run(op)
        except Exception as err:  # surfaced below
            errors.append(err)

    threads = [threading.Thread(target=step, args=pair, daemon=True) for pair in steps]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a sync step did not complete within 60 s"
    assert not errors, errors


@pytest.fixture
def cluster():
    with InProcessCluster(num_ps=1, num_workers=3) as local:
        yield local


def test_two_of_three_replicas_average_their_gradients(cluster):
    workers = [build_worker(cluster, i, replicas_to_aggregate=2) for i in range(2)]
    run_concurrently([(session, op) for session, op, _ in workers])
    session, _, (global_step, var0, var1) = workers[0]
    step, value0, value1 = session.run([global_step, var0, var1])
    assert step == 1
    # Mean of workers 0 and 1: var0 -= 2.0 * 0.5; var1 -= 2.0 * 0.6.
    np.testing.assert_allclose(value0, [0.0 - 1.0, 1.0 - 1.0], rtol=1e-6)
    np.testing.assert_allclose(value1, [2.0 - 1.2], rtol=1e-6)
    for session, _, _ in workers:
        session.close()


def test_one_of_three_applies_each_gradient_alone(cluster):
    """A backup-worker set-up: any single replica's gradient makes a step."""
    chief_session, chief_op, (global_step, var0, var1) = build_worker(cluster, 0, replicas_to_aggregate=1)
    run_concurrently([(chief_session, chief_op)])
    step, value0, value1 = chief_session.run([global_step, var0, var1])
    assert step == 1
    np.testing.assert_allclose(value0, [0.0 - 0.2, 1.0 - 0.2], rtol=1e-6)
    np.testing.assert_allclose(value1, [2.0 - 0.4], rtol=1e-6)
    chief_session.close()


def build_pushing_worker(cluster, index, replicas_to_aggregate):
    """Worker ``index`` that pushes its gradients and never takes a token: a replica that died after its push."""

    def make_train(optimizer, global_step, var0, var1):
        optimizer.build_aggregation([var0, var1], global_step)
        accumulators = optimizer.accumulators()
        grad0, grad1 = (tf.constant(g) for g in GRADIENTS[index])
        stamp = tf.constant(0, global_step.dtype.base_dtype)
        return tf.group(
            accumulators[var0.name].apply_grad(grad0, local_step=stamp),
            accumulators[var1.name].apply_grad(grad1, local_step=stamp),
        )

    return build_replica(cluster, index, replicas_to_aggregate, make_train)


def tokens_waiting(cluster, replica_index):
    """How many tokens replica ``replica_index``'s queue on the ps holds, read through its shared name."""
    with tf.Graph().as_default(), tf.compat.v1.device("/job:ps/task:0"):
        queue = tf.queue.FIFOQueue(
            -1, tf.int64, shapes=[()], shared_name=f"ps_toolkit_sync_token_q_replica_{replica_index}"
        )
        size = queue.size()
        with tf.compat.v1.Session(cluster.targets["worker"][0]) as session:
            return session.run(size)


def test_a_replica_cannot_take_a_dead_replicas_token(cluster):
    """3 of 3, the third gone after its push: step 2 cannot be made by the other two pushing twice.

    With TensorFlow's single token queue, they would take the dead replica's
    token and push again, and training would go on without it.
    """
    workers = [build_worker(cluster, i, replicas_to_aggregate=3) for i in range(2)]
    dead_session, dead_push, _ = build_pushing_worker(cluster, 2, replicas_to_aggregate=3)
    run_concurrently([(session, op) for session, op, _ in workers] + [(dead_session, dead_push)])
    session, _, (global_step, _, _) = workers[0]
    assert session.run(global_step) == 1
    give_up = tf.compat.v1.RunOptions(timeout_in_ms=4000)
    outcomes = []

    def step_alone(session, op):
        try:
            session.run(op, options=give_up)
            outcomes.append("stepped")
        except tf.errors.DeadlineExceededError:
            outcomes.append("waited")

    threads = [threading.Thread(target=step_alone, args=(s, op), daemon=True) for s, op, _ in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert outcomes == ["waited", "waited"]
    assert session.run(global_step) == 1
    assert tokens_waiting(cluster, 2) == 1
    for session, _, _ in [*workers, (dead_session, None, None)]:
        session.close()


def test_backup_replicas_go_on_and_a_restarted_replica_rejoins_fresh(cluster):
    """2 of 3, the third absent for three steps: its queue holds one token, not three; restarted, it counts at once."""
    workers = [build_worker(cluster, i, replicas_to_aggregate=2) for i in range(2)]
    for _ in range(3):
        run_concurrently([(session, op) for session, op, _ in workers])
    assert tokens_waiting(cluster, 2) == 1
    # Its local init empties its queue and takes the global step: its first gradient is not stale.
    restarted = build_worker(cluster, 2, replicas_to_aggregate=2)
    assert tokens_waiting(cluster, 2) == 0
    run_concurrently([(workers[1][0], workers[1][1]), (restarted[0], restarted[1])])
    session, _, (global_step, var0, var1) = workers[0]
    step, value0, value1 = session.run([global_step, var0, var1])
    assert step == 4
    # Three means of workers 0 and 1 (var0 -= 2.0 * 0.5 each), then workers 1 and 2 (var0 -= 2.0 * 0.7).
    np.testing.assert_allclose(value0, [0.0 - 3.0 - 1.4, 1.0 - 3.0 - 1.4], rtol=1e-6)
    np.testing.assert_allclose(value1, [2.0 - 3 * 1.2 - 1.3], rtol=1e-6)
    for session, _, _ in [*workers, restarted]:
        session.close()


def test_a_backup_replica_that_starts_after_the_end_takes_a_release_token(cluster):
    """1 of 3, over at step 2 and released: a replica whose session starts then makes its one step and returns.

    Its local init must not empty its queue then: the tokens in it are the
    release tokens, and no update will ever send another.
    """

    def make_train(optimizer, global_step, var0, var1):
        grads = [(tf.constant(GRADIENTS[0][0]), var0), (tf.constant(GRADIENTS[0][1]), var1)]
        return optimizer.apply_gradients(grads, global_step=global_step), optimizer.release_op(tokens_per_replica=2)

    chief_session, (chief_op, release), (global_step, _, _) = build_replica(cluster, 0, 1, make_train, last_step=2)
    for _ in range(2):
        run_concurrently([(chief_session, chief_op)])
    assert chief_session.run(global_step) == 2
    chief_session.run(release)  # what SyncReleaseHook.end does as the chief ends
    chief_session.close()
    late_session, (late_op, _), _ = build_replica(cluster, 1, 1, make_train, last_step=2)
    late_session.run(late_op, options=tf.compat.v1.RunOptions(timeout_in_ms=10_000))
    late_session.close()


def build_looping_worker(cluster, index, steps_per_run, last_step):
    """Worker ``index`` with multi_step.sync_multi_step: up to ``steps_per_run`` sync steps per run."""
    num_replicas = cluster.cluster_config("worker", index).num_replicas

    def make_train(optimizer, global_step, var0, var1):
        def loss_and_gradients():
            # The gradient is fixed; the loss is a variable read, so each iteration reads the ps afresh.
            grad0, grad1 = (tf.constant(g) for g in GRADIENTS[index])
            return tf.reduce_sum(var0.read_value()), [(grad0, var0), (grad1, var1)]

        return multi_step.sync_multi_step(
            optimizer, global_step, [var0, var1], loss_and_gradients, steps_per_run, last_step
        )

    return build_replica(cluster, index, num_replicas, make_train)


@pytest.fixture
def two_worker_cluster():
    with InProcessCluster(num_ps=1, num_workers=2) as local:
        yield local


def test_sync_loop_takes_several_averaged_steps_in_one_run(two_worker_cluster):
    workers = [build_looping_worker(two_worker_cluster, i, steps_per_run=3, last_step=100) for i in range(2)]
    run_concurrently([(session, [run.global_step, run.steps_done]) for session, run, _ in workers])
    session, run, (global_step, var0, var1) = workers[0]
    step, value0, value1 = session.run([global_step, var0, var1])
    assert step == 3
    # Three steps, each the mean of workers 0 and 1: var0 -= 3 * 2.0 * 0.5; var1 -= 3 * 2.0 * 0.6.
    np.testing.assert_allclose(value0, [0.0 - 3.0, 1.0 - 3.0], rtol=1e-6)
    np.testing.assert_allclose(value1, [2.0 - 3.6], rtol=1e-6)
    for session, _, _ in workers:
        session.close()


def test_sync_loop_stops_at_the_last_step_without_waiting(two_worker_cluster):
    """Asked for 5 steps with 2 left, every replica takes 2 and returns: no one waits for a sixth token."""
    workers = [build_looping_worker(two_worker_cluster, i, steps_per_run=5, last_step=2) for i in range(2)]
    done = {}

    def run_once(index):
        session, run, _ = workers[index]
        done[index] = session.run([run.global_step, run.steps_done])

    threads = [threading.Thread(target=run_once, args=(i,), daemon=True) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a replica waited past the last step"
    assert [list(done[i]) for i in range(2)] == [[2, 2], [2, 2]]
    for session, _, _ in workers:
        session.close()


def lone_replica_optimizer():
    return PerReplicaSyncOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(0.1), replicas_to_aggregate=1, total_num_replicas=1, replica_index=0
    )


def test_sync_loop_refuses_a_variable_without_gradient():
    """The chief's aggregation would wait forever on that variable's accumulator: a build-time error instead."""
    with tf.Graph().as_default():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        used = tf.compat.v1.get_variable("used", initializer=[1.0])
        unused = tf.compat.v1.get_variable("unused", initializer=[2.0])
        optimizer = lone_replica_optimizer()

        def loss_and_gradients():
            loss = tf.reduce_sum(used.read_value())
            return loss, [(tf.ones([1]), used), (None, unused)]

        with pytest.raises(ValueError, match="none for unused:0"):
            multi_step.sync_multi_step(optimizer, global_step, [used, unused], loss_and_gradients, 3, 10)


def test_sync_loop_refuses_an_undeclared_sparse_gradient():
    """Accumulators are built before the body: a sparse gradient declared dense is refused, not averaged wrong."""
    with tf.Graph().as_default():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        table = tf.compat.v1.get_variable("table", initializer=[[1.0], [2.0]])
        optimizer = lone_replica_optimizer()

        def loss_and_gradients():
            rows = tf.gather(table.read_value(), [0])
            return tf.reduce_sum(rows), [(tf.IndexedSlices(tf.ones([1, 1]), tf.constant([0])), table)]

        with pytest.raises(ValueError, match="gradient of table:0 is not of the kind"):
            multi_step.sync_multi_step(optimizer, global_step, [table], loss_and_gradients, 3, 10)


def test_per_replica_tokens_refuse_what_they_cannot_do():
    """Several gradients per replica per step would need several tokens each; a replica outside the job has no queue."""
    descent = tf.compat.v1.train.GradientDescentOptimizer(0.1)
    with pytest.raises(ValueError, match="between 1 and the 2 replicas, got 3"):
        PerReplicaSyncOptimizer(descent, replicas_to_aggregate=3, total_num_replicas=2, replica_index=0)
    with pytest.raises(ValueError, match="below 2, got 2"):
        PerReplicaSyncOptimizer(descent, replicas_to_aggregate=2, total_num_replicas=2, replica_index=2)


def step_or_wait(session, op, seconds=4.0) -> str:
    """'stepped' if the sync step completes within ``seconds``, 'waited' if it is still waiting for its token."""
    try:
        session.run(op, options=tf.compat.v1.RunOptions(timeout_in_ms=int(seconds * 1000)))
        return "stepped"
    except tf.errors.DeadlineExceededError:
        return "waited"


def test_a_replica_restarted_mid_step_does_not_count_twice(two_worker_cluster):
    """2 of 2: worker 1 pushes, dies waiting for its token, restarts; the step is the mean of BOTH workers.

    Its previous incarnation's gradient is still in the accumulators: the new
    one's push for the same step must be dropped. Counted again, the step
    would be made of worker 1's gradient alone, before the chief pushed.
    """
    chief_session, chief_op, (global_step, var0, var1) = build_worker(two_worker_cluster, 0, 2)
    first_session, first_op, _ = build_worker(two_worker_cluster, 1, 2)
    assert step_or_wait(first_session, first_op) == "waited"
    first_session.close()  # the process killed while it waited
    restarted_session, restarted_op, _ = build_worker(two_worker_cluster, 1, 2)
    assert step_or_wait(restarted_session, restarted_op) == "waited"
    assert chief_session.run(global_step) == 0
    run_concurrently([(chief_session, chief_op), (restarted_session, restarted_op)])
    step, value0, value1 = chief_session.run([global_step, var0, var1])
    assert step == 1
    # One mean of workers 0 and 1: var0 -= 2.0 * 0.5; var1 -= 2.0 * 0.6.
    np.testing.assert_allclose(value0, [0.0 - 1.0, 1.0 - 1.0], rtol=1e-6)
    np.testing.assert_allclose(value1, [2.0 - 1.2], rtol=1e-6)
    for session in (chief_session, restarted_session):
        session.close()


def put_token(cluster, replica_index, value):
    """Enqueues a token holding ``value`` in replica ``replica_index``'s queue on the ps, by its shared name."""
    with tf.Graph().as_default(), tf.compat.v1.device("/job:ps/task:0"):
        queue = tf.queue.FIFOQueue(
            -1, tf.int64, shapes=[()], shared_name=f"ps_toolkit_sync_token_q_replica_{replica_index}"
        )
        enqueue = queue.enqueue(tf.constant(value, tf.int64))
        with tf.compat.v1.Session(cluster.targets["worker"][0]) as session:
            session.run(enqueue)


def test_a_spare_token_from_before_the_push_does_not_free_the_replica(two_worker_cluster):
    """A token left in the queue by an update its push had no part in (the local init's race) is not taken.

    Taken, it would let the replica push a second gradient for the same step.
    """
    chief_session, chief_op, (global_step, var0, _) = build_worker(two_worker_cluster, 0, 2)
    session, op, _ = build_worker(two_worker_cluster, 1, 2)
    put_token(two_worker_cluster, 1, 0)  # the step this replica's local init read: not an update after its push
    assert step_or_wait(session, op) == "waited"
    # Its push is in; the chief's completes the step, and the token of that update frees it.
    run_concurrently([(chief_session, chief_op)])
    step, value0 = chief_session.run([global_step, var0])
    assert step == 1
    np.testing.assert_allclose(value0, [0.0 - 1.0, 1.0 - 1.0], rtol=1e-6)
    assert step_or_wait(session, op, seconds=30) == "stepped"  # returns once stepped; the bound is for a hang
    for each in (chief_session, session):
        each.close()


def test_other_replicas_are_not_ready_until_the_chief_has_set_its_accumulators_step(two_worker_cluster):
    """After a restore the variables are ready before the chief's init: a push then would be judged stale."""
    graph = tf.Graph()
    config = two_worker_cluster.cluster_config("worker", 1)
    with graph.as_default(), tf.compat.v1.device(strategies.device_setter(config)):
        global_step = tf.compat.v1.train.get_or_create_global_step()
        var0 = tf.compat.v1.get_variable("var0", initializer=[0.0, 1.0])
        optimizer = PerReplicaSyncOptimizer(
            tf.compat.v1.train.GradientDescentOptimizer(LEARNING_RATE), 2, config.num_replicas, config.replica_index
        )
        optimizer.build_aggregation([var0], global_step)
        not_ready, forget = optimizer.aggregation_not_ready_op(), optimizer.forget_pushes_op()
    with tf.compat.v1.Session(two_worker_cluster.targets["worker"][1], graph=graph) as session:
        assert list(session.run(not_ready)) == [b"the chief's sync aggregation (its accumulators' step)"]
        chief_session, _, _ = build_worker(two_worker_cluster, 0, 2)
        assert list(session.run(not_ready)) == []
        session.run(forget)  # what the chief runs before it restores the model
        assert len(session.run(not_ready)) == 1
        chief_session.close()
