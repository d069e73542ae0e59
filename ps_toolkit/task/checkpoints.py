"""Checkpoint directory checks made by the chief before training: never a silent restart at 0.

TensorFlow trusts the ``checkpoint`` state file: if it is garbage or deleted
the chief silently starts from step 0; if it names a checkpoint whose
``.index`` is missing, whose data is truncated or corrupted, the restore
crashes. Here every candidate is read in full (which checks each tensor's
CRC), the newest good one is chosen and the state file repaired, orphaned
``*_temp`` save folders are removed, and a folder whose checkpoints are all
unreadable is refused with a message.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import shutil
import uuid

import tensorflow as tf

from ps_toolkit import dynamic_embedding
from ps_toolkit.base import paths, tf_internals
from ps_toolkit.base.errors import ConfigError
from ps_toolkit.cluster.config import PS, ClusterConfig
from ps_toolkit.dynamic_embedding import delta_files
from ps_toolkit.task import table_checkpoints

log = logging.getLogger(__name__)
_STEP = re.compile(r"-(\d+)$")
_SHARED_CHECK_FILE = ".ps_toolkit_shared_dir_check"


def _candidate_prefixes(checkpoint_dir: str) -> list[str]:
    """Whole checkpoint prefixes found on disk (by .index or data files), newest step first; deltas are not."""
    prefixes = set()
    for path in glob.glob(os.path.join(checkpoint_dir, "*.index")):
        prefixes.add(path[: -len(".index")])
    for path in glob.glob(os.path.join(checkpoint_dir, "*.data-?????-of-?????")):
        prefixes.add(path.rsplit(".data-", 1)[0])
    wholes = [p for p in prefixes if not delta_files.is_delta(p)]
    with_steps = [(int(m.group(1)), p) for p in wholes if (m := _STEP.search(p))]
    return [p for _, p in sorted(with_steps, reverse=True)]


def checkpoint_problem(prefix: str) -> str | None:
    """None if every tensor of the checkpoint reads back intact, else what is wrong."""
    if not os.path.exists(prefix + ".index"):
        return "its .index file is missing"
    try:
        reader = tf.compat.v1.train.NewCheckpointReader(prefix)
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    except (tf.errors.OpError, ValueError, RuntimeError, IndexError) as err:  # IndexError: truncated data
        text = getattr(err, "message", None) or str(err)
        return f"{type(err).__name__}: {text.strip().splitlines()[0][:200]}"
    return None


def remove_orphaned_temp_dirs(checkpoint_dir: str) -> list[str]:
    """Deletes ``*_temp*`` folders a killed save left behind (only the chief writes here)."""
    removed = []
    for path in glob.glob(os.path.join(checkpoint_dir, "*_temp*")):
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    for path in removed:
        log.warning("removed %s, left by a checkpoint save that never finished", path)
    return removed


def _state_file_target(checkpoint_dir: str) -> tuple[str | None, str | None]:
    """(the checkpoint the state file names, a problem with the state file)."""
    state_path = os.path.join(checkpoint_dir, "checkpoint")
    if not os.path.exists(state_path):
        return None, "the state file 'checkpoint' is missing"
    try:
        state = tf.compat.v1.train.get_checkpoint_state(checkpoint_dir)
    except Exception as err:  # a text-proto parse error from TensorFlow
        return None, f"the state file 'checkpoint' is unreadable ({type(err).__name__})"
    if state is None or not state.model_checkpoint_path:
        return None, "the state file 'checkpoint' names no checkpoint"
    path = state.model_checkpoint_path
    return (path if os.path.isabs(path) else os.path.join(checkpoint_dir, path)), None


def prepare_checkpoint_dir(checkpoint_dir: str) -> str | None:
    """Validates the folder the chief will restore from; returns the checkpoint to use.

    Returns None when there is no checkpoint (a fresh start). Falls back to the
    newest readable checkpoint, repairing the state file, with a warning.
    Raises ConfigError when checkpoints exist but none is readable.
    """
    if not os.path.isdir(checkpoint_dir):
        return None
    remove_orphaned_temp_dirs(checkpoint_dir)
    candidates = _candidate_prefixes(checkpoint_dir)
    named, state_problem = _state_file_target(checkpoint_dir)
    if not candidates:
        if named:
            raise ConfigError(
                f"checkpoint dir {checkpoint_dir}: the state file names {os.path.basename(named)}, "
                "but no checkpoint files exist; restore them or remove the state file to start from step 0"
            )
        return None
    problems = []
    for prefix in candidates:
        problem = checkpoint_problem(prefix)
        if problem is None:
            break
        problems.append(f"{os.path.basename(prefix)}: {problem}")
    else:
        raise ConfigError(
            f"checkpoint dir {checkpoint_dir} holds checkpoints but none is readable "
            f"({'; '.join(problems)}); move them away to start from step 0"
        )
    if state_problem or os.path.normpath(named) != os.path.normpath(prefix) or problems:
        reasons = [r for r in [state_problem, *problems] if r]
        log.warning(
            "checkpoint dir %s: %s; resuming from %s, the newest readable checkpoint",
            checkpoint_dir,
            "; ".join(reasons) or f"the state file names {named}",
            os.path.basename(prefix),
        )
        tf.compat.v1.train.update_checkpoint_state(checkpoint_dir, prefix)
    return prefix


def check_model_matches_checkpoint(checkpoint_dir: str, variables, tables=(), table_tensors=None) -> int | None:
    """Refuses a checkpoint the model cannot restore; says which step a run resumes from.

    ``variables`` are the graph's saveable variables (``tf.compat.v1.global_variables()``),
    ``tables`` its dynamic tables (their rows' dim is checked, whatever the number of shards),
    ``table_tensors`` the tables' checkpoint tensors (``table_checkpoints.table_specs()``).
    The newest checkpoint in ``checkpoint_dir`` must hold exactly the model's
    variables with the model's shapes: otherwise ConfigError names the first
    difference (in name order) and the folder, before any session is created.
    A checkpoint whose table tensors are damaged (a bucket missing, values
    shorter than keys, another dtype) is passed over like an unreadable one:
    one warning, and the run resumes from the newest whole checkpoint (the
    state file repaired); ConfigError when none is whole.
    With a matching checkpoint, logs ``resuming from global step N in DIR`` and
    returns N; with none, returns None.
    """
    prefix = tf.train.latest_checkpoint(checkpoint_dir) if os.path.isdir(checkpoint_dir) else None
    if prefix is None:
        return None
    _refuse_another_model(checkpoint_dir, prefix, variables, tables)
    prefix = _newest_with_whole_tables(checkpoint_dir, prefix, table_tensors or {})
    step = _global_step(tf.compat.v1.train.NewCheckpointReader(prefix), prefix)
    delta = delta_files.read_state(checkpoint_dir)
    if delta is not None and delta.base == os.path.basename(prefix) and delta.global_step > step:
        # The session's restore merges the delta over the whole checkpoint (and warns if it cannot).
        log.info(
            "resuming from global step %s in %s (delta checkpoint %s over %s)",
            delta.global_step,
            checkpoint_dir,
            delta.delta,
            delta.base,
        )
    else:
        log.info("resuming from global step %s in %s", step, checkpoint_dir)
    return step


def _refuse_another_model(checkpoint_dir: str, prefix: str, variables, tables) -> None:
    """ConfigError naming the first difference between checkpoint ``prefix``'s variables and tables and the model's."""
    reader = tf.compat.v1.train.NewCheckpointReader(prefix)
    # Keys starting with "_" are TensorFlow's bookkeeping (the object graph), not variables.
    saved = {name: list(shape) for name, shape in reader.get_variable_to_shape_map().items() if name[:1] != "_"}
    expected = _saveable_shapes(variables)
    differences, table_keys = dynamic_embedding.checkpoint_differences(saved, tables)
    saved = {name: shape for name, shape in saved.items() if name not in table_keys}
    for name in sorted(set(saved) | set(expected)):
        if name not in saved:
            differences.append(f"the model's variable {name} {expected[name]} is not in the checkpoint")
        elif name not in expected:
            differences.append(f"the checkpoint's variable {name} {saved[name]} is not in the model")
        elif saved[name] != expected[name]:
            differences.append(f"variable {name} is {saved[name]} in the checkpoint, {expected[name]} in the model")
    if differences:
        raise ConfigError(
            f"checkpoint dir {checkpoint_dir} holds a checkpoint of another model ({os.path.basename(prefix)}): "
            f"{_first_of(differences, 'differences')}; give another --checkpoint_dir, or move its files away "
            "to start from step 0"
        )


def _newest_with_whole_tables(checkpoint_dir: str, prefix: str, table_tensors: dict) -> str:
    """``prefix``, or the newest older readable checkpoint whose table tensors restore (with a warning)."""
    faults = table_checkpoints.table_faults(prefix, table_tensors)
    if not faults:
        return prefix
    problems = [f"{os.path.basename(prefix)}: {_first_of(faults, 'faults')}"]
    newest = os.path.normpath(prefix)
    older = [candidate for candidate in _candidate_prefixes(checkpoint_dir) if os.path.normpath(candidate) != newest]
    for candidate in older:
        problem = checkpoint_problem(candidate)
        if problem is None:
            faults = table_checkpoints.table_faults(candidate, table_tensors)
            problem = _first_of(faults, "faults") if faults else None
        if problem is None:
            log.warning(
                "checkpoint dir %s: %s; resuming from %s, the newest readable checkpoint",
                checkpoint_dir,
                "; ".join(problems),
                os.path.basename(candidate),
            )
            tf.compat.v1.train.update_checkpoint_state(checkpoint_dir, candidate)
            return candidate
        problems.append(f"{os.path.basename(candidate)}: {problem}")
    raise ConfigError(
        f"checkpoint dir {checkpoint_dir} holds checkpoints but none is readable "
        f"({'; '.join(problems)}); move them away to start from step 0"
    )


def _first_of(items: list[str], what: str) -> str:
    """The first of ``items``, with how many more there are."""
    more = f" (and {len(items) - 1} more {what})" if len(items) > 1 else ""
    return f"{items[0]}{more}"


def _saveable_shapes(variables) -> dict[str, list[int]]:
    """{checkpoint key: full shape} as the Saver names them; a partitioned variable counts once, whole."""
    shapes = {}
    for name, value in tf_internals.saver_keyed_variables(variables).items():
        if isinstance(value, list | tuple):  # the slices of a partitioned variable
            shapes[name] = tf_internals.partitioned_full_shape(value)
        else:
            shapes[name] = value.shape.as_list()
    return shapes


def _global_step(reader, prefix: str) -> int | None:
    if reader.has_tensor("global_step"):
        return int(reader.get_tensor("global_step"))
    match = _STEP.search(prefix)
    return int(match.group(1)) if match else None


def check_ps_share_checkpoint_dir(cluster: ClusterConfig, target: str, checkpoint_dir: str, session_config) -> None:
    """Checks every ps sees the chief's checkpoint folder: each ps writes its own shards there."""
    if not cluster.num_ps:
        return
    os.makedirs(checkpoint_dir, exist_ok=True)
    path = os.path.abspath(os.path.join(checkpoint_dir, _SHARED_CHECK_FILE))
    token = uuid.uuid4().hex
    paths.write_file_nofollow(path, token)
    graph = tf.Graph()
    with graph.as_default():
        reads = []
        for index in range(cluster.num_ps):
            with tf.device(f"/job:{PS}/task:{index}"):
                reads.append(tf.io.read_file(path))
    options = tf.compat.v1.RunOptions(timeout_in_ms=60_000)
    try:
        with tf.compat.v1.Session(target, graph=graph, config=session_config) as session:
            seen = [_read_or_empty(session, read, options) for read in reads]
    finally:
        os.remove(path)
    for index, content in enumerate(seen):
        if content.decode("ascii", "replace") != token:
            raise ConfigError(
                f"/job:{PS}/task:{index} ({cluster.jobs[PS][index]}) does not see the checkpoint dir "
                f"{checkpoint_dir}: each ps writes its own checkpoint shards there, so it must be a folder "
                "shared by the chief and every ps (same path on every host)"
            )


def _read_or_empty(session, read, options) -> bytes:
    try:
        return session.run(read, options=options)
    except tf.errors.NotFoundError:
        return b""
