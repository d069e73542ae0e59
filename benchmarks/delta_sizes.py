"""A delta checkpoint's size against its whole checkpoint: the ctr model's dynamic tables, trained in one process.

    python -m benchmarks.delta_sizes [--whole_at=1000] [--after=100] [--ids=zipf1.05]

Trains the benchmark's ctr model (26 dynamic tables, a table per field, 1M ids per field, dim 8,
batch 512, SGD) as one task, with a whole checkpoint at global step ``whole_at`` and a delta
checkpoint ``after`` steps later (``--delta_checkpoint_steps``), and prints one JSON line: the
whole checkpoint's bytes, the delta's, their ratio, and the global steps between them. One process
paces every step, so the delta is exactly ``after`` steps after the whole checkpoint; the cluster
runs of scripts/benchmark.py record the same names at their own pace (benchmarks.checkpoint_sizes).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_WHOLE_AT = flags.DEFINE_integer("whole_at", 1000, "The global step of the whole checkpoint (a multiple of 20).")
_AFTER = flags.DEFINE_integer("after", 100, "Global steps from the whole checkpoint to the delta (a multiple of 20).")
_IDS = flags.DEFINE_string("ids", "zipf1.05", "The ids' law (benchmarks.ctr_data.ID_LAWS).")


def measure(whole_at: int, after: int, ids: str) -> dict:
    """Trains to ``whole_at + after`` (and one run past it) and measures the folder's whole checkpoint and delta."""
    import ps_toolkit
    from benchmarks import checkpoint_sizes, ctr_model

    if not 0 < after < whole_at:
        raise app.UsageError(f"--after={after} must be between 0 and --whole_at={whole_at}")
    with tempfile.TemporaryDirectory(prefix="ps_toolkit_delta_sizes_") as checkpoint_dir:
        config = ps_toolkit.TrainConfig(
            train_steps=whole_at + after + 20,
            checkpoint_dir=checkpoint_dir,
            save_checkpoint_steps=whole_at,
            delta_checkpoint_steps=after,
            batch_size=512,
            optimizer="sgd",
            learning_rate=0.05,
        )
        params = {"ids": ids, "tables": "per_field", "dynamic": True}
        ps_toolkit.train(ctr_model.model_fn, ctr_model.input_fn, config, params=params)
        sizes = checkpoint_sizes.measure(checkpoint_dir)
    whole, delta = sizes["checkpoint_bytes"], sizes["delta_bytes"]
    return {
        "ids": ids,
        "whole_at": whole_at,
        "checkpoint_bytes": whole,
        f"delta_bytes_{after}": delta,
        "delta_steps": sizes["delta_steps"],
        "delta_over_checkpoint": round(delta / whole, 3) if whole and delta else None,
    }


def main(argv):
    del argv
    print(json.dumps(measure(_WHOLE_AT.value, _AFTER.value, _IDS.value)))


if __name__ == "__main__":
    app.run(main)
