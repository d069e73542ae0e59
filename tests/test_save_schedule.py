"""Saves by steps every N global steps whatever the chief's pace: a slow chief in an async in-graph loop."""

import logging
import os
import re
import sys
import threading
import time

import pytest
import tensorflow as tf

from ps_toolkit.launch.local_cluster import InProcessCluster
from ps_toolkit.task.roles import trainer
from ps_toolkit.task.save_schedule import SavePacer
from ps_toolkit.training.config import TrainConfig
from ps_toolkit.training.model_api import ModelDefinition

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "dynamic_clicks")
sys.path.insert(0, EXAMPLE)
import dynamic_clicks  # noqa: E402

# Each batch's wait: the chief at a tenth of the other replica's pace or less (the other's steps also take
# 10-50 ms of CPU each, more on a loaded machine: the chief's wait is long enough to stay the slow one).
SECS_PER_BATCH = {0: 0.25, 1: 0.01}


def test_the_pacer_ends_a_run_near_the_next_save_at_the_pace_seen():
    assert SavePacer(every_steps=50).steps_for_next_run(global_step=0, own_steps=0, wanted=10) == 10  # none saved
    pacer = SavePacer(every_steps=50)
    pacer.after_save(None, 0)
    # No earlier run seen: one step, to see the pace.
    assert pacer.steps_for_next_run(global_step=1, own_steps=1, wanted=10) == 1
    # That step took 4 - 1 = 3 global steps; 46 to the save at 50 is 16 steps: the 10 wanted.
    assert pacer.steps_for_next_run(global_step=4, own_steps=2, wanted=10) == 10
    # 10 own steps took 34 - 4 = 30 global steps (3 each); 16 to the save at 50: 6 own steps.
    assert pacer.steps_for_next_run(global_step=34, own_steps=12, wanted=10) == 6
    # 6 own steps took 49 - 34 = 15 (2.5 each), the run before 3 each: 3 is kept; 1 to go: one step, never none.
    assert pacer.steps_for_next_run(global_step=49, own_steps=18, wanted=10) == 1
    pacer.after_save(None, 52)
    # 1 own step took 52 - 49 = 3; the next save at 102: 50 to go, 17 own steps: the 10 wanted.
    assert pacer.steps_for_next_run(global_step=52, own_steps=19, wanted=10) == 10
    # 10 own steps took 142 - 52 = 90 (9 each); 102 is passed: one step.
    assert pacer.steps_for_next_run(global_step=142, own_steps=29, wanted=10) == 1


def _slow_chief_input_fn(input_context, params=None):
    dataset = dynamic_clicks.input_fn(input_context, params)
    wait = SECS_PER_BATCH[input_context.input_pipeline_id]

    def slowly(*batch):
        time.sleep(wait)  # the replica's pace, not a synchronisation
        return batch

    def slow(features, labels):
        flat = tf.nest.flatten((features, labels))
        out = tf.numpy_function(slowly, flat, [t.dtype for t in flat])
        for tensor, original in zip(out, flat, strict=True):
            tensor.set_shape(original.shape)
        return tf.nest.pack_sequence_as((features, labels), out)

    return dataset.map(slow)


@pytest.mark.parametrize("every_steps", [40])
def test_a_chief_at_a_tenth_of_the_pace_still_saves_every_n_global_steps(tmp_path, caplog, every_steps):
    train_steps = 400
    config = TrainConfig(
        checkpoint_dir=str(tmp_path),
        train_steps=train_steps,
        batch_size=32,
        steps_per_run=10,
        save_checkpoint_steps=every_steps,
        final_evaluation="chief",
    )
    definition = ModelDefinition(dynamic_clicks.model_fn, _slow_chief_input_fn, None, {}, name="slow_chief")
    results = {}
    with caplog.at_level(logging.INFO), InProcessCluster(num_ps=1, num_workers=2) as cluster:

        def train(index):
            try:
                results[index] = trainer.train(
                    cluster.cluster_config("worker", index), cluster.targets["worker"][index], config, definition
                )
            except Exception as err:  # reported below, with the other replica's result
                results[index] = err

        replicas = [threading.Thread(target=train, args=(index,)) for index in range(2)]
        for replica in replicas:
            replica.start()
        for replica in replicas:
            replica.join(300)
        assert not any(replica.is_alive() for replica in replicas), results
    assert all(isinstance(results[index], dict) for index in range(2)), results
    chief, worker = results[0], results[1]
    assert chief["local_steps"] * 3 < worker["local_steps"], results  # the chief is the slow one
    saved = [int(m[1]) for message in caplog.messages if (m := re.match(r"Saving checkpoints for (\d+) into", message))]
    assert saved[0] == 0 and saved[-1] >= train_steps, saved
    # The chief's first run (one step, with the session's start-up) cannot be cut short, and the run after its
    # one-step probe of the pace is judged by that probe alone: from then on, at most one interval and the
    # global steps of one short chief run pass between saves (each gap past the interval is the run's overshoot).
    gaps = [later - earlier for earlier, later in zip(saved[2:], saved[3:], strict=False)]
    assert len(gaps) >= 3 and max(gaps) <= 2 * every_steps, saved
