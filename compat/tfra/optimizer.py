"""TFRA's ``DynamicEmbeddingOptimizer(opt)``: the same ``tf.compat.v1.train`` optimizer, now training the tables too.

As in TFRA the optimizer object itself is returned, changed in place (so code
that ignores the return value still trains the tables): its class becomes a
subclass of its own class whose ``compute_gradients`` adds the tables' pairs
(``ps_toolkit.dynamic_embedding.table_gradients``) and whose
``apply_gradients`` applies them on the ps shards with the optimizer's own
formulas and slots (``TableOptimizer``). A table is trained when its variable
is trainable and either ``var_list`` is None or names one of its
TrainableWrappers, as TFRA's trainable wrappers were.

``SyncReplicasOptimizer`` around it (TFRA's PS demos) trains the tables too:
run_legacy's class (``tf.train`` and ``tf.compat.v1.train``) merges each
table's rows into one sparse gradient per shard before its accumulators
(``supervision.table_rows_for_sync``).
"""

from __future__ import annotations

import tensorflow as tf

from ps_toolkit import dynamic_embedding as tables
from ps_toolkit.base.errors import ConfigError
from ps_toolkit_compat.tfra import lookups, variable, variable_ops
from ps_toolkit_compat.tfra.refused import NotServedUseError

_SWAPPED = {}  # optimizer class -> its table-training subclass


class _TrainsTables:
    """Mixed in before the optimizer's own class (see ``DynamicEmbeddingOptimizer``)."""

    def compute_gradients(self, loss, var_list=None, **kwargs):
        if callable(loss):  # minimize(callable): in graph mode the loss is built once, here
            loss = loss()
        wrapped = None if var_list is None else [v for v in var_list if isinstance(v, lookups.TrainableWrapper)]
        variables = None if var_list is None else [v for v in var_list if not isinstance(v, lookups.TrainableWrapper)]
        dense = []
        if variables is None and tf.compat.v1.trainable_variables() or variables:
            dense = list(super().compute_gradients(loss, var_list=variables, **kwargs))
        chosen = _trained_table_names(wrapped)
        table_pairs = tables.table_gradients(loss)
        return dense + [(gradient, rows) for gradient, rows in table_pairs if rows.table.name in chosen]

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        grads_and_vars = list(grads_and_vars)
        table_pairs = [(g, v) for g, v in grads_and_vars if tables.is_table_rows(v) and g is not None]
        dense = [(g, v) for g, v in grads_and_vars if not tables.is_table_rows(v)]
        if table_pairs and all(g is None for g, _ in dense):
            # The loss reads only tables (an unrelated variable is in the graph): TFRA trained the tables; TF's own
            # apply_gradients would refuse "No gradients provided" for the variables.
            dense = []
        step = global_step if global_step is not None else tf.compat.v1.train.get_global_step()
        table_optimizer = tables.TableOptimizer(self)
        context = table_optimizer.begin_step([v for g, v in dense if g is not None], table_pairs)
        with tf.name_scope((name or self.get_name()) + "_tables"):
            updates = table_optimizer.table_updates(table_pairs, step, context)
        with tf.control_dependencies(updates):
            if dense:
                return super().apply_gradients(dense, global_step=global_step, name=name)
            finished = table_optimizer.rule.finish(context, False) if table_pairs else []
            if global_step is not None:
                finished.append(tf.compat.v1.assign_add(global_step, 1).op)
            return tf.group(*updates, *finished)

    def get_slot(self, var, name):
        """A TrainableWrapper's slot ``name`` (TF's slot names) as TFRA's slot wrapper: ``.params`` is the slot's
        table (``size()``, ``export()``); any other variable's slot is TF's own."""
        if not isinstance(var, lookups.TrainableWrapper):
            return super().get_slot(var, name)
        rule = tables.TableOptimizer(self).rule
        slot = {tf_name: own for own, tf_name in _TF_SLOT_NAMES.get(rule.name, {}).items()}.get(name, name)
        if slot not in rule.slots:
            return None
        return SlotWrapper(SlotTable(var.params, slot), var.ids)

    def get_slot_names(self):
        """TF's slot names of the variables, and those of the slots the tables keep (in TF's names)."""
        rule = tables.TableOptimizer(self).rule
        table_slots = [_TF_SLOT_NAMES.get(rule.name, {}).get(name, name) for name in rule.slots]
        return sorted(set(super().get_slot_names()) | set(table_slots))


# Row rule -> {the table's slot name: TF's}, where TF's optimizer names its slot otherwise.
_TF_SLOT_NAMES = {"ftrl": {"accumulator": "accum"}}


class SlotTable:
    """One optimizer slot of a Variable's table, on every shard: TFRA's slot variable (``size``, ``export``)."""

    def __init__(self, params, slot: str):
        self.params, self.slot = params, slot
        self.name = f"{params.name}/{slot}"

    def size(self, name=None):
        with tf.name_scope(name or "slot_size"):
            ids, _ = self.export()
            return tf.size(ids, out_type=tf.int64)

    def export(self, name=None):
        with tf.name_scope(name or "slot_export"):
            self.params.table.shards[0].slot(self.slot)  # made now if the optimizer has not applied yet
            return tables.table_ops.export_component(self.params.table, f"slot_{self.slot}")

    @property
    def tables(self) -> list:
        """The slot's table on each shard, as TFRA's slot variable's ``tables``: a Saver's ``var_list`` entries."""
        return [variable_ops.ShardTable(self.params, index, self.slot) for index in range(self.params.shard_num)]


class SlotWrapper:
    """What TFRA's ``get_slot(trainable_wrapper, name)`` returned: ``.params`` is the slot's table."""

    def __init__(self, params: SlotTable, ids):
        self.params, self.ids, self.name = params, ids, params.name


def _trained_table_names(wrappers) -> set:
    """The tables the optimizer trains: every trainable one, or those of the given TrainableWrappers."""
    trainable = {v.table.name for v in variable.variables_of_graph().values() if v.trainable}
    if wrappers is None:
        return trainable
    return {w.params.table.name for w in wrappers} & trainable


def DynamicEmbeddingOptimizer(self, bp_v2=False, synchronous=False, **kwargs):  # noqa: N802 (TFRA's name)
    """Makes ``self`` (a tf.compat.v1.train optimizer) train the dynamic tables too, and returns it.

    ``bp_v2`` changes nothing (updates are computed on the ps from the row there). ``synchronous`` was
    TFRA's Horovod all-reduce: not served (use ps_toolkit's sync replicas).
    """
    del bp_v2, kwargs
    if synchronous:
        raise NotServedUseError("DynamicEmbeddingOptimizer(synchronous=True) is TFRA's Horovod all-reduce; not served")
    if not isinstance(self, tf.compat.v1.train.Optimizer):
        raise NotServedUseError(
            f"DynamicEmbeddingOptimizer({type(self).__name__}): only tf.compat.v1.train optimizers are served "
            "(Keras optimizers train TFRA's eager path)"
        )
    try:
        tables.TableOptimizer(self).rule  # noqa: B018 - an optimizer the tables cannot apply is refused now
    except ConfigError as err:
        raise NotServedUseError(f"DynamicEmbeddingOptimizer: {err}") from None
    cls = type(self)
    if not issubclass(cls, _TrainsTables):
        if cls not in _SWAPPED:
            _SWAPPED[cls] = type(cls.__name__, (_TrainsTables, cls), {"__module__": cls.__module__})
        self.__class__ = _SWAPPED[cls]
    return self
