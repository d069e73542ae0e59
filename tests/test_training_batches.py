"""Every step of an in-graph loop trains on a batch of its own, async and sync, through trainer.train.

A batch tensor built outside the loop enters it as a constant: every step of a
run would then train on one batch. The count here is of batches the input
pipeline actually delivered, against the steps the replica took.
"""

import dataclasses

import pytest
import tensorflow as tf

from ps_toolkit.launch.local_cluster import InProcessCluster
from ps_toolkit.models import classifiers
from ps_toolkit.task.roles import trainer
from ps_toolkit.training.config import TrainConfig


def _counting(definition, delivered: list):
    """The built-in definition, with each batch its input pipeline delivers noted in ``delivered``."""

    def input_fn(input_context):
        def note(values):
            delivered.append(len(values))
            return values

        def counted(features, labels):
            noted = tf.numpy_function(note, [labels], labels.dtype, stateful=True)
            noted.set_shape(labels.shape)
            return features, noted

        return definition.input_fn(input_context).map(counted)

    return dataclasses.replace(definition, input_fn=input_fn)


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
def test_each_step_of_a_run_takes_a_new_batch(tmp_path, sync):
    delivered, steps_seen = [], []
    config = TrainConfig(
        train_steps=40, steps_per_run=20, batch_size=32, sync_replicas=sync, checkpoint_dir=str(tmp_path)
    )
    with InProcessCluster(num_ps=1, num_workers=1) as cluster:
        result = trainer.train(
            cluster.cluster_config("worker", 0),
            cluster.targets["worker"][0],
            config,
            _counting(classifiers.definition("softmax"), delivered),
            on_progress=steps_seen.append,
        )
    # The first run takes one step, so the replica's first step is seen at once; then whole runs. An
    # async chief saving by steps takes one more single step, to see its pace (save_schedule.SavePacer).
    assert steps_seen[:3] == ([1, 21, 40] if sync else [1, 2, 22]), steps_seen
    assert result["global_step"] == 40
    assert result["local_steps"] >= 40
    # Prefetching may take one batch ahead of the steps; never one per session.run (3 or 4 runs here).
    assert result["local_steps"] <= len(delivered) <= result["local_steps"] + 3, (len(delivered), result)
    assert set(delivered) == {32}
    # The last run took steps: the loss reported is a real one (a run of no step reported 0.0).
    assert result["final_loss"] > 0
    assert result["eval"]["accuracy"] > 0.5
