"""ps_toolkit.batch_indices: an input's batch indices start at the global step, so a restore resumes past them."""

import tensorflow as tf

import ps_toolkit
from ps_toolkit.training.model_api import InputContext


def test_an_input_starts_at_the_global_step_it_finds_at_each_initialization(tmp_path):
    with tf.Graph().as_default():
        step = tf.compat.v1.train.get_or_create_global_step()
        iterator = tf.compat.v1.data.make_initializable_iterator(ps_toolkit.batch_indices(InputContext(2, 1, 8)))
        index = iterator.get_next()
        advance = step.assign_add(1)
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(iterator.initializer)
            taken = []
            for _ in range(5):  # a step per batch, as one replica alone trains
                taken.append(session.run(index))
                session.run(advance)
            assert taken == [0, 1, 2, 3, 4]
            path = saver.save(session, str(tmp_path / "model.ckpt"))
            session.run(step.assign_add(7))  # other replicas' steps after the save, lost with the restore
            session.run(iterator.initializer)  # a worker's session made again, no restore
            assert session.run(index) == 12
            saver.restore(session, path)
            session.run(iterator.initializer)  # as a session made again after a ps restart initializes it
            assert [session.run(index) for _ in range(2)] == [5, 6]  # past every batch the checkpoint trained


def test_without_a_global_step_the_indices_start_at_zero():
    with tf.Graph().as_default():
        iterator = tf.compat.v1.data.make_one_shot_iterator(ps_toolkit.batch_indices(InputContext(1, 0, 8)))
        index = iterator.get_next()
        with tf.compat.v1.Session() as session:
            assert [session.run(index) for _ in range(3)] == [0, 1, 2]
