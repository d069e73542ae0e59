"""ps_toolkit.training.multi_step: several SGD steps per session.run, and how many to ask for."""

import pytest


def test_steps_for_next_run_shares_the_rest_among_replicas():
    from ps_toolkit.training.multi_step import steps_for_next_run

    assert steps_for_next_run(0, 1000, 2, 10) == 10
    assert steps_for_next_run(990, 1000, 2, 10) == 5
    assert steps_for_next_run(999, 1000, 2, 10) == 1
    assert steps_for_next_run(1005, 1000, 2, 10) == 1


def test_multi_step_runs_several_sgd_steps_in_one_session_run():
    import numpy as np
    import tensorflow as tf

    from ps_toolkit.training import multi_step

    with tf.Graph().as_default():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        weight = tf.compat.v1.get_variable("w", initializer=0.0)
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.1)

        def loss_and_gradients():
            loss = tf.square(weight * 2.0 - 6.0)
            return loss, optimizer.compute_gradients(loss)

        step = multi_step.apply_step_fn(optimizer, global_step, loss_and_gradients)
        run = multi_step.multi_step(step, 5)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            _, step_value = session.run([run.loss, run.global_step])
            assert step_value == 5
            # Five plain SGD steps on (2w - 6)^2 from w = 0: w <- w - 0.1 * 4 (2w - 6).
            expected = 0.0
            for _ in range(5):
                expected -= 0.1 * 4 * (2 * expected - 6)
            assert session.run(weight) == pytest.approx(expected, rel=1e-5)
            _, step_value = session.run([run.loss, run.global_step], {run.num_steps: 2})
            assert step_value == 7
    assert np.isfinite(expected)
