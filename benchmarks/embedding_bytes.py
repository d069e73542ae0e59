"""Bytes a training step moves for the embedding model, against the bytes of the rows it touches.

    python -m benchmarks.embedding_bytes [--steps=200]

Runs a 2 ps + 1 worker cluster in this process, inside a private network
namespace, so that its loopback carries nothing but the cluster's own gRPC
traffic; counts that loopback's bytes (``/proc/net/dev``) over the steps after
warm-up, for ps_toolkit's async loop, one step per run, and sync. Prints one
JSON line per mode. Needs root or unprivileged user namespaces.
"""

from __future__ import annotations

import json
import tempfile

from absl import app, flags

from benchmarks.cluster_run import loopback_bytes
from benchmarks.synthetic import EMBEDDING
from ps_toolkit.network import netns

_STEPS = flags.DEFINE_integer("steps", 200, "Global steps per mode, the first fifth not counted.")


def measure(mode: dict, steps: int) -> dict:
    from benchmarks import embedding_model

    with tempfile.TemporaryDirectory(prefix="ps_toolkit-bytes-") as checkpoint_dir:
        samples = _train_sampling_loopback(mode, steps, checkpoint_dir)
    start = next(s for s in samples if s[0] >= steps // 5)
    end = samples[-1]
    per_step = (end[1] - start[1]) / max(end[0] - start[0], 1)
    touched = EMBEDDING.bytes_per_step
    return {
        "mode": mode,
        "bytes_per_step": round(per_step),
        "touched_rows_bytes_per_step": touched,
        "ratio_to_touched": round(per_step / touched, 3),
        "table_bytes": embedding_model.VOCAB * embedding_model.DIM * 4,
    }


def _train_sampling_loopback(mode: dict, steps: int, checkpoint_dir: str) -> list[tuple[int, int]]:
    """Trains the embedding model on 2 ps + 1 worker in this process; (global step, loopback bytes) per progress."""
    from benchmarks import embedding_model
    from ps_toolkit.launch.local_cluster import InProcessCluster
    from ps_toolkit.task.roles import trainer
    from ps_toolkit.training.config import TrainConfig
    from ps_toolkit.training.model_api import ModelDefinition

    definition = ModelDefinition(embedding_model.model_fn, embedding_model.input_fn, name="embedding")
    config = TrainConfig(
        train_steps=steps,
        batch_size=embedding_model.BATCH_SIZE,
        optimizer=embedding_model.OPTIMIZER,
        learning_rate=embedding_model.LEARNING_RATE,
        checkpoint_dir=checkpoint_dir,
        save_checkpoint_steps=10 * steps,
        **mode,
    )
    samples = []

    def sample(global_step: int) -> None:
        samples.append((global_step, loopback_bytes()))

    with InProcessCluster(num_ps=2, num_workers=1) as cluster:
        trainer.train(
            cluster.cluster_config("worker", 0), cluster.targets["worker"][0], config, definition, on_progress=sample
        )
    return samples


def main(argv):
    del argv
    kind = netns.enter_private_network()
    print(json.dumps({"network": kind}), flush=True)
    for mode in ({"steps_per_run": 20}, {"steps_per_run": 1}, {"steps_per_run": 20, "sync_replicas": True}):
        print(json.dumps(measure(mode, _STEPS.value)), flush=True)


if __name__ == "__main__":
    app.run(main)
