"""TFRA checkpoints restored into the compat layer's tables: a TFRA model_dir goes on training here, unchanged.

Real TFRA saves each shard of a ``dynamic_embedding.Variable`` named ``NAME`` (a variable scope's
``/`` written ``_``) as two tensors, ``SCOPE/NAME_mht_IofN-keys`` and ``-values``, and each
optimizer slot as a Variable of its own, ``SCOPE/NAME_OPTIMIZER_SLOT_mht_IofN-...`` (Adam's
``user_Adam_m_mht_1of2-values``). ``install()`` teaches ``tf.compat.v1.train.Saver.restore`` to
read them: when a graph with TFRA Variables restores a checkpoint that holds TFRA's shards and
none of ps_toolkit's own table keys, the dense variables restore as usual and every table's rows
and slots are inserted from TFRA's shards, all of them whatever the number of ps (the rows go to
the shards by the tables' own hash). The checkpoint is checked whole before anything is written:
a table of the model it lacks, one of another dim or key dtype, or no table at all is one line.
"""

from __future__ import annotations

import dataclasses
import logging
import re

import numpy as np
import tensorflow as tf

from ps_toolkit.base import tf_internals as toolkit_internals
from ps_toolkit.base.errors import ConfigError
from ps_toolkit.dynamic_embedding import table_ops
from ps_toolkit.dynamic_embedding.saving import GroupShardSaveable
from ps_toolkit_compat import tf_internals

log = logging.getLogger(__name__)
# The last part of a TFRA shard's checkpoint key; 0.8's file-system saver adds _rankR_sizeS.
_TFRA_SHARD = re.compile(
    r"^(?P<table>[^/]+)_mht_(?P<index>\d+)of(?P<count>\d+)(?:_rank\d+_size\d+)?-(?P<part>keys|values)$"
)
# ps_toolkit's own table keys (saving.checkpoint_name): a checkpoint with any is not TFRA's.
_OWN_TABLE_KEY = re.compile(r"/(rows|meta|slot_[^/]+)/bucket_\d\d/(keys|values)$")
# TensorFlow's slot names that the row rules call otherwise (tf.compat.v1.train.FtrlOptimizer: "accum").
_SLOT_ALIASES = {"accumulator": ("accumulator", "accum")}


@dataclasses.dataclass
class TfraShards:
    """One TFRA hash table in a checkpoint: its shards' key and value tensors, in shard order."""

    name: str
    keys: list[str] = dataclasses.field(default_factory=list)
    values: list[str] = dataclasses.field(default_factory=list)


def tfra_tables(saved_names) -> dict[str, TfraShards]:
    """{TFRA table name: its shards} of the checkpoint keys ``saved_names``."""
    found: dict[str, list[tuple[int, str, str]]] = {}
    for key in saved_names:
        match = _TFRA_SHARD.match(key.rsplit("/", 1)[-1])
        if match:
            found.setdefault(match["table"], []).append((int(match["index"]), match["part"], key))
    tables = {}
    for name, parts in found.items():
        shards = TfraShards(name)
        for _, part, key in sorted(parts):
            (shards.keys if part == "keys" else shards.values).append(key)
        tables[name] = shards
    return tables


@dataclasses.dataclass(frozen=True)
class Component:
    """What goes into one table: its rows (``slot`` None) or one slot, from one TFRA table's shards."""

    variable: object  # the compat layer's dynamic_embedding.Variable
    slot: str | None
    source: TfraShards


def plan(reader, variables, prefix: str) -> list[Component]:
    """What to insert from the checkpoint at ``prefix`` into ``variables``; ConfigError for the first mismatch."""
    shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
    found = tfra_tables(shapes)
    if not found:
        raise ConfigError(
            f"checkpoint {prefix} holds no dynamic embedding table (neither TFRA's SCOPE/NAME_mht_IofN-keys "
            f"nor ps_toolkit's); the model has {', '.join(sorted(v.name for v in variables))}"
        )
    components, problems = [], []
    for variable in sorted(variables, key=lambda v: v.name):
        name = variable.name.replace("/", "_")
        rows = found.get(name)
        if rows is None:
            problems.append(f"the model's table {variable.name} is not in it (its tables: {', '.join(sorted(found))})")
            continue
        saved_dtype = tf.as_dtype(dtypes[rows.keys[0]])
        if saved_dtype != variable.key_dtype:
            problems.append(
                f"table {variable.name} has {variable.key_dtype.name} keys; the checkpoint's {saved_dtype.name}"
            )
        dims = {tuple(shapes[key][1:]) for key in rows.values}
        if dims != {(variable.dim,)}:
            problems.append(f"table {variable.name} has rows of dim {variable.dim}; the checkpoint's {sorted(dims)}")
        components.append(Component(variable, None, rows))
        for slot in slot_names(variable.table):
            source = _slot_source(found, name, slot)
            if source is None:
                log.warning("checkpoint %s has no %s slot of table %s: it starts anew", prefix, slot, variable.name)
            else:
                components.append(Component(variable, slot, source))
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ConfigError(f"TFRA checkpoint {prefix} does not fit the model: {problems[0]}{more}; nothing restored")
    return components


def _slot_source(found: dict[str, TfraShards], table_name: str, slot: str) -> TfraShards | None:
    """TFRA's table of ``slot`` of ``table_name``: NAME_OPTIMIZER_SLOT (the optimizer's name is not known here)."""
    for tf_slot in _SLOT_ALIASES.get(slot, (slot,)):
        candidates = [n for n in sorted(found) if n.startswith(table_name + "_") and n.endswith("_" + tf_slot)]
        # The optimizer's name is one word ("Adam", "Momentum"): prefer the shortest, not another table's slot.
        candidates.sort(key=len)
        if candidates:
            return found[candidates[0]]
    return None


def is_tfra_checkpoint(saved_names) -> bool:
    """Whether the checkpoint's tables are TFRA's (or it has none): ps_toolkit's table keys are not in it."""
    return not any(_OWN_TABLE_KEY.search(name) for name in saved_names)


# --- The tables' layout: every use of it is in the four functions below -------------------------------------


def slot_names(table) -> list[str]:
    """The optimizer slots ``table`` has in this graph (made when its optimizer was built)."""
    return table_ops.slot_names(table)


def insert(table, ids: tf.Tensor, rows: tf.Tensor, seen_at_step: tf.Tensor) -> tf.Operation:
    """Puts ``rows`` for ``ids`` into ``table``, each on its shard, admitted and last seen at ``seen_at_step``."""
    return table_ops.insert(table, ids, rows, seen_at_step)


def insert_slot(table, slot: str, ids: tf.Tensor, values: tf.Tensor) -> tf.Operation:
    """Puts optimizer slot ``slot``'s ``values`` for ``ids`` into ``table``, each on its shard."""
    return table_ops.insert_slot(table, slot, ids, values)


def export_slot(table, slot: str) -> tuple[tf.Tensor, tf.Tensor]:
    """(ids, values) of optimizer slot ``slot`` of ``table``, over all its shards."""
    return table_ops.export_component(table, f"slot_{slot}")


# --- The restore ------------------------------------------------------------------------------------------------


def restore(session, prefix: str, variables, reader) -> None:
    """Restores the TFRA checkpoint at ``prefix`` into the default graph's variables and ``variables``' tables."""
    components = plan(reader, variables, prefix)  # every check before anything is written
    graph = session.graph
    # The default Saver's list (TensorFlow's variables._all_saveable_objects): the global variables, then the
    # saveables; a Saver given its own var_list restores these all the same.
    saveables = graph.get_collection(tf.compat.v1.GraphKeys.SAVEABLE_OBJECTS)
    table_saveables = [s for s in saveables if isinstance(s, GroupShardSaveable)]
    dense = graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES)
    dense += [s for s in saveables if not isinstance(s, GroupShardSaveable)]
    saved = reader.get_variable_to_shape_map()
    with graph.as_default(), tf_internals.unfinalized(graph):
        keyed = toolkit_internals.saver_keyed_variables(dense)
        present = {name: v for name, v in keyed.items() if name in saved}
        absent = [v for name, v in keyed.items() if name not in saved]
        step = tf.constant(int(reader.get_tensor("global_step")) if "global_step" in saved else 0, tf.int64)
        if present:  # TensorFlow's own restore (this module's would come back here)
            _ORIGINAL_RESTORE[0](tf.compat.v1.train.Saver(var_list=present), session, prefix)
        if absent:
            log.warning(
                "checkpoint %s lacks %d variables of the model; they start from their initializers", prefix, len(absent)
            )
            session.run([v.initializer for v in absent if hasattr(v, "initializer")])
        for component in components:
            _insert_component(session, component, reader, step)
        session.run([s.filled.assign(True, read_value=False) for s in table_saveables])
    log.info(
        "restored TFRA checkpoint %s: %d tables, %d slots",
        prefix,
        len(variables),
        sum(c.slot is not None for c in components),
    )


def _insert_component(session, component: Component, reader, step: tf.Tensor) -> None:
    variable, table = component.variable, component.variable.table
    ids = np.concatenate([reader.get_tensor(key) for key in component.source.keys])
    values = np.concatenate([reader.get_tensor(key) for key in component.source.values])
    if variable.key_dtype == tf.int32:
        ids = ids.astype(np.int64)  # int32 keys are kept as int64 (compat/tfra/variable.py)
    ids_in = tf.compat.v1.placeholder(table.key_dtype, [None])
    values_in = tf.compat.v1.placeholder(table.value_dtype, [None, table.dim])
    if component.slot is None:
        op = insert(table, ids_in, values_in, step)
    else:
        op = insert_slot(table, component.slot, ids_in, values_in)
    session.run(op, feed_dict={ids_in: ids, values_in: values.astype(table.value_dtype.as_numpy_dtype)})


_ORIGINAL_RESTORE = []  # TensorFlow's Saver.restore, once install() replaced it
_RESTORES_TABLES = "_ps_toolkit_restores_tables"  # set on each Saver: whether its var_list holds the tables


def install() -> None:
    """``tf.compat.v1.train.Saver.restore`` reads TFRA's tables where a checkpoint has them; idempotent.

    Only a Saver whose var_list holds the tables (the default list, or one naming a table) does: a Saver of
    some dense variables restores them as TensorFlow does, whatever the graph's tables.
    """
    saver_class = tf.compat.v1.train.Saver
    if getattr(saver_class.restore, "_ps_toolkit_tfra_import", False):
        return
    original_init, original = saver_class.__init__, saver_class.restore
    _ORIGINAL_RESTORE[:] = [original]

    def init_noting_tables(self, var_list=None, *args, **kwargs):
        setattr(self, _RESTORES_TABLES, _lists_tables(var_list))
        original_init(self, var_list, *args, **kwargs)

    def restore_tfra_too(self, sess, save_path):
        variables = _tfra_variables(sess) if getattr(self, _RESTORES_TABLES, True) else []
        if variables and save_path and tf.io.gfile.exists(save_path + ".index"):
            reader = tf.compat.v1.train.NewCheckpointReader(save_path)
            if is_tfra_checkpoint(reader.get_variable_to_shape_map()):
                return restore(sess, save_path, variables, reader)
        return original(self, sess, save_path)

    restore_tfra_too._ps_toolkit_tfra_import = True
    for wrapper, wrapped in ((init_noting_tables, original_init), (restore_tfra_too, original)):
        wrapper.__doc__ = wrapped.__doc__
    saver_class.__init__, saver_class.restore = init_noting_tables, restore_tfra_too


def _lists_tables(var_list) -> bool:
    """Whether a Saver's ``var_list`` holds tables: the default (every saveable) or one naming a table."""
    from ps_toolkit_compat.tfra import variable

    if var_list is None:
        return True
    items = var_list.values() if isinstance(var_list, dict) else var_list
    return any(isinstance(item, GroupShardSaveable | variable.Variable) for item in items)


def _tfra_variables(session) -> list:
    from ps_toolkit_compat.tfra import variable

    graph = getattr(session, "graph", None)
    return list(variable.variables_of_graph(graph).values()) if graph is not None else []
