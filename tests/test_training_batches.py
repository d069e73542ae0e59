"""Every step of an in-graph loop trains on a batch of its own, async and sync, through training.train.

A batch tensor built outside the loop enters it as a constant: every step of a
run would then train on one batch. The count here is of batches the input
pipeline actually delivered, against the steps the replica took.
"""

import pytest
import tensorflow as tf

from ps_toolkit import training
from ps_toolkit.data import load_dataset
from ps_toolkit.local_cluster import InProcessCluster
from ps_toolkit.train_config import TrainConfig


def _counting_input(delivered: list):
    """training.make_train_input, with each delivered batch noted in ``delivered`` (the worker is in-process)."""
    real = training.make_train_input

    def make(*args, **kwargs):
        next_batch, hook = real(*args, **kwargs)

        def counted_next_batch():
            images, labels = next_batch()

            def note(values):
                delivered.append(len(values))
                return values

            noted = tf.numpy_function(note, [labels], labels.dtype, stateful=True)
            noted.set_shape(labels.shape)
            return images, noted

        return counted_next_batch, hook

    return make


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
def test_each_step_of_a_run_takes_a_new_batch(tmp_path, monkeypatch, sync):
    delivered = []
    monkeypatch.setattr(training, "make_train_input", _counting_input(delivered))
    config = TrainConfig(
        train_steps=40, steps_per_run=20, batch_size=32, sync_replicas=sync, checkpoint_dir=str(tmp_path)
    )
    with InProcessCluster(num_ps=1, num_workers=1) as cluster:
        result = training.train(
            cluster.cluster_config("worker", 0), cluster.targets["worker"][0], config, load_dataset(None)
        )
    assert result["global_step"] == 40
    assert result["local_steps"] >= 40
    # One batch per step taken, not one per session.run (2 or 3 runs here).
    assert len(delivered) == result["local_steps"], (len(delivered), result)
    assert set(delivered) == {32}
    # The last run took steps: the loss reported is a real one (a run of no step reported 0.0).
    assert result["final_loss"] > 0
