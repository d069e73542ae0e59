"""ps_toolkit.batch_indices: each replica's batch position saved with the model; a restore resumes the input there."""

import tensorflow as tf

import ps_toolkit
from ps_toolkit.training import batch_position
from ps_toolkit.training.model_api import InputContext


def _replica_input(replica: int):
    """(initializer, taken index, positions) of replica ``replica`` of 2, as the trainer takes batches."""
    tf.compat.v1.train.get_or_create_global_step()
    dataset = ps_toolkit.batch_indices(InputContext(2, replica, 8))
    iterator = tf.compat.v1.data.make_initializable_iterator(dataset)
    return iterator.initializer, batch_position.counted(iterator.get_next())


def test_a_restore_resumes_each_replica_at_the_first_batch_the_checkpoint_has_not_taken(tmp_path):
    with tf.Graph().as_default():
        initializer, index = _replica_input(1)
        positions = tf.compat.v1.get_collection(batch_position.BATCH_POSITIONS)[0].variables
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(initializer)
            assert [session.run(index) for _ in range(5)] == [0, 1, 2, 3, 4]
            path = saver.save(session, str(tmp_path / "model.ckpt"))
            assert [session.run(index) for _ in range(3)] == [5, 6, 7]  # taken after the save: lost with a restore
            assert session.run(positions) == [0, 8]  # replica 0's position is its own
            saver.restore(session, path)
            session.run(initializer)  # as a session made again after a ps restart initializes it
            assert [session.run(index) for _ in range(2)] == [5, 6]


def test_a_fresh_model_starts_at_batch_zero_and_a_graph_without_positions_takes_batches_as_they_are():
    with tf.Graph().as_default():
        initializer, index = _replica_input(0)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(initializer)
            assert session.run(index) == 0
    with tf.Graph().as_default():
        batch = tf.constant([1, 2])
        assert batch_position.counted(batch) is batch
