"""The ctr runs' checkpoint sizes: a whole checkpoint, and a delta checkpoint 100 steps after it.

ps_toolkit's ctr runs with dynamic tables save a whole checkpoint every third of their steps and a
delta every ``DELTA_AFTER_STEPS`` steps after each (``save_flags``; with fixed tables the record
holds the newest whole checkpoint's size, saved as the timing runs save): at the end the folder
holds the newest delta and its base (docs/online.md names the files), the steps between them as
the chief's pace made them (``delta_steps``; ``python -m benchmarks.delta_sizes`` measures them at
an exact step in one process). Read without TensorFlow: the driver never imports it.
"""

from __future__ import annotations

import glob
import json
import os
import re

DELTA_AFTER_STEPS = 100
DELTA_STATE_FILE = "delta_checkpoint"  # ps_toolkit.dynamic_embedding.delta_files.STATE_FILE


def save_flags(train_steps: int) -> list[str]:
    """A dynamic-table run's save flags: whole checkpoints every third of the run, a delta every 100 steps."""
    return [f"--save_checkpoint_steps={max(1, train_steps // 3)}", f"--delta_checkpoint_steps={DELTA_AFTER_STEPS}"]


def _bytes(prefix: str) -> int:
    files = glob.glob(glob.escape(prefix) + ".index") + glob.glob(glob.escape(prefix) + ".data-?????-of-?????")
    return sum(os.path.getsize(path) for path in files)


def _newest_whole(checkpoint_dir: str) -> str | None:
    try:
        with open(os.path.join(checkpoint_dir, "checkpoint")) as file:
            match = re.search(r'^model_checkpoint_path: "(.+)"$', file.read(), re.M)
    except OSError:
        return None
    return os.path.join(checkpoint_dir, os.path.basename(match.group(1))) if match else None


def measure(checkpoint_dir: str) -> dict:
    """{checkpoint_bytes, delta_bytes, delta_steps}: the delta's base and the delta, else the newest whole."""
    try:
        with open(os.path.join(checkpoint_dir, DELTA_STATE_FILE)) as file:
            state = json.load(file)
    except (OSError, ValueError):
        state = None
    if state is None:
        whole = _newest_whole(checkpoint_dir)
        return {"checkpoint_bytes": _bytes(whole) if whole else None, "delta_bytes": None, "delta_steps": None}
    base_step = int(re.search(r"-(\d+)$", state["base"]).group(1))
    return {
        "checkpoint_bytes": _bytes(os.path.join(checkpoint_dir, state["base"])),
        "delta_bytes": _bytes(os.path.join(checkpoint_dir, state["delta"])),
        "delta_steps": int(state["global_step"]) - base_step,
    }
