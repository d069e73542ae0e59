"""Where delta checkpoints lie: their names beside the whole checkpoint, their state file, which one a restore reads.

A delta of the whole checkpoint ``model.ckpt-N`` written at global step M is the TensorFlow
checkpoint ``model.ckpt-N.delta-M`` (``.index`` and ``.data-*``) in the same folder. The
TensorFlow state file ``checkpoint`` never names a delta, so ``tf.train.latest_checkpoint`` and
every plain reader see the last whole checkpoint; the newest delta is named by a state file of
its own, ``delta_checkpoint`` (JSON: the base, the base step its rows were filtered by, the
delta, its global step), written after the delta's files and replaced whole.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import logging
import os
import re

log = logging.getLogger(__name__)
STATE_FILE = "delta_checkpoint"
_DELTA = re.compile(r"\.delta-(\d+)$")
_STEP = re.compile(r"-(\d+)$")


@dataclasses.dataclass(frozen=True)
class DeltaState:
    """The newest delta: its base whole checkpoint and itself (file names in the folder), and their steps."""

    base: str
    base_step: int  # entries last seen at this step or later are the delta's
    delta: str
    global_step: int


def is_delta(prefix: str) -> bool:
    """Whether the checkpoint prefix names a delta checkpoint."""
    return bool(_DELTA.search(prefix))


def delta_prefix(base_prefix: str, global_step: int) -> str:
    """The prefix of the delta of ``base_prefix`` at ``global_step``."""
    return f"{base_prefix}.delta-{global_step}"


def write_state(checkpoint_dir: str, state: DeltaState) -> None:
    """Replaces the folder's delta state file by ``state`` (one rename: a reader sees the old or the new)."""
    path = os.path.join(checkpoint_dir, STATE_FILE)
    with open(path + ".tmp", "w") as file:
        json.dump(dataclasses.asdict(state), file)
    os.replace(path + ".tmp", path)


def read_state(checkpoint_dir: str) -> DeltaState | None:
    """The folder's newest delta, None if it has none; an unreadable state file is one warning and None."""
    path = os.path.join(checkpoint_dir, STATE_FILE)
    if not os.path.exists(path):
        return None
    try:
        with open(path) as file:
            fields = json.load(file)
        return DeltaState(
            str(fields["base"]), int(fields["base_step"]), str(fields["delta"]), int(fields["global_step"])
        )
    except (OSError, ValueError, KeyError, TypeError) as err:
        log.warning("delta state file %s is unreadable (%s: %s); no delta is restored", path, type(err).__name__, err)
        return None


def delta_for(whole_prefix: str) -> tuple[str, DeltaState] | None:
    """(prefix, state) of the newest delta built on the whole checkpoint ``whole_prefix``; else None.

    A delta newer than ``whole_prefix`` that builds on another checkpoint (its base gone, or passed
    over as unreadable) or whose files are missing is one warning: the restore takes the whole
    checkpoint alone. A delta older than it is stale and passed over in silence.
    """
    folder = os.path.dirname(whole_prefix)
    state = read_state(folder)
    if state is None:
        return None
    restored = os.path.basename(whole_prefix)
    prefix = os.path.join(folder, state.delta)
    if state.base != restored:
        step = _STEP.search(restored)
        if step is not None and state.global_step <= int(step.group(1)):
            return None
        gone = not os.path.exists(os.path.join(folder, state.base + ".index"))
        why = "is gone" if gone else f"is not {restored}, the checkpoint restored"
        log.warning(
            "delta checkpoint %s (global step %d): its base checkpoint %s %s; restoring %s alone",
            state.delta,
            state.global_step,
            state.base,
            why,
            restored,
        )
        return None
    if not os.path.exists(prefix + ".index"):
        log.warning("delta checkpoint %s: its .index file is missing; restoring %s alone", state.delta, restored)
        return None
    return prefix, state


def remove_deltas_except(checkpoint_dir: str, keep: str) -> None:
    """Deletes every delta checkpoint's files in the folder but those of prefix ``keep``."""
    for path in glob.glob(os.path.join(checkpoint_dir, "*.delta-*")):
        prefix = re.sub(r"\.(index|data-\d{5}-of-\d{5})$", "", path)
        if is_delta(prefix) and os.path.basename(prefix) != os.path.basename(keep) and os.path.isfile(path):
            os.remove(path)


def checkpoint_bytes(prefix: str) -> int:
    """The bytes of a checkpoint's files (its ``.index`` and data files)."""
    files = glob.glob(glob.escape(prefix) + ".index") + glob.glob(glob.escape(prefix) + ".data-?????-of-?????")
    return sum(os.path.getsize(path) for path in files)
