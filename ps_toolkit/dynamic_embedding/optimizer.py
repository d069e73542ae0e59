"""Training the tables: the gradient of a loss with respect to its lookups' rows, and an optimizer that applies it.

Design: docs/design.md, "Dynamic embedding tables".
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from ps_toolkit.dynamic_embedding import apply, keys, lookups, row_rules, sync_pairs
from ps_toolkit.dynamic_embedding.lookups import LookupRecord
from ps_toolkit.dynamic_embedding.sync_pairs import ShardRows
from ps_toolkit.dynamic_embedding.table import tables_of_graph


@dataclasses.dataclass(frozen=True)
class TableRows:
    """The 'variable' of a table's gradient pair: the unique rows one lookup read."""

    record: LookupRecord

    @property
    def name(self) -> str:
        """The lookup's rows tensor's name."""
        return self.record.rows.name

    @property
    def table(self):
        """The DynamicTable the lookup read."""
        return self.record.table


def is_table_rows(variable) -> bool:
    """Whether a (gradient, variable) pair's variable stands for a table's rows (a lookup's, or a shard's in sync)."""
    return isinstance(variable, TableRows | ShardRows)


def sync_gradients(grads_and_vars) -> list:
    """The pairs with each table's lookups merged and split by shard, as the sync accumulators take them.

    Args:
        grads_and_vars: (gradient, variable) pairs, the tables' with ``TableRows`` variables.

    Returns:
        The variables' pairs as they are, then one (IndexedSlices, ``ShardRows``) pair per shard.
    """
    grads_and_vars = list(grads_and_vars)
    tables = [(g, v) for g, v in grads_and_vars if isinstance(v, TableRows) and g is not None]
    pairs = [(g, v) for g, v in grads_and_vars if not isinstance(v, TableRows)]
    for records in _by_table(tables).values():
        ids, grads, counts = apply.merged(records)
        pairs += sync_pairs.per_shard_pairs(records[0][0].table, ids, grads, counts)
    return pairs


def sync_shard_variables(graph=None) -> list:
    """A ShardRows for every shard of every table of the graph: the 'variables' a sync loop aggregates."""
    return [ShardRows(table, shard) for table in tables_of_graph(graph) for shard in table.shards]


def _table_of(rows):
    return rows.table


def _by_table(pairs) -> dict:
    by_table = {}
    for gradient, rows in pairs:
        by_table.setdefault(rows.table.name, []).append((rows.record, gradient))
    return by_table


def table_gradients(loss: tf.Tensor) -> list[tuple[tf.Tensor, TableRows]]:
    """(gradient summed per unique id, TableRows) for each lookup of the default graph that ``loss`` depends on.

    Args:
        loss: A scalar loss tensor.

    Returns:
        One pair per lookup with a gradient; empty if ``loss`` reads no table.
    """
    reachable = _ops_reaching(loss)
    records = [record for record in lookups.records_of_graph() if record.rows.op in reachable]
    if not records:
        return []
    gradients = tf.gradients(loss, [record.rows for record in records])
    return [
        (apply.summed_gradient(gradient, tf.shape(record.rows)[0]), TableRows(record))
        for gradient, record in zip(gradients, records, strict=True)
        if gradient is not None
    ]


class TableOptimizer:
    """A TF1 optimizer that also trains the dynamic tables its loss looked up.

    Args:
        optimizer: a ``tf.compat.v1.train`` GradientDescent, Momentum, Adagrad, Adam, Ftrl or
            RMSProp optimizer; it updates the variables, and its formulas update the rows.

    Raises:
        ConfigError: (when a table is first applied) an optimizer the tables cannot apply.
    """

    def __init__(self, optimizer):
        self.optimizer = optimizer
        self._rule = None

    def __getattr__(self, name):
        # Everything else (get_slot, get_name, variables...) is the wrapped optimizer's.
        return getattr(self.optimizer, name)

    @property
    def rule(self) -> row_rules.RowRule:
        """How the wrapped optimizer's formula updates rows and their slots."""
        if self._rule is None:
            self._rule = row_rules.rule_for(self.optimizer)
        return self._rule

    def compute_gradients(self, loss, var_list=None, **kwargs) -> list:
        """The wrapped optimizer's pairs for the variables (``var_list``'s, less any TableRows), then the tables'.

        Args:
            loss: A scalar loss tensor.
            var_list: The variables to train; by default every trainable variable.
            **kwargs: Passed to the wrapped optimizer's ``compute_gradients``.

        Returns:
            (gradient, variable) pairs, the tables' with ``TableRows`` variables.
        """
        variables = None if var_list is None else [v for v in var_list if not is_table_rows(v)]
        trainable = variables if variables is not None else tf.compat.v1.trainable_variables()
        pairs = self.optimizer.compute_gradients(loss, var_list=variables, **kwargs) if trainable else []
        return list(pairs) + self.table_gradients(loss)

    def table_gradients(self, loss) -> list:
        """The tables' pairs of ``loss``: the module's ``table_gradients``."""
        return table_gradients(loss)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None) -> tf.Operation:
        """Applies the variables' pairs with the wrapped optimizer and the tables' on their shards.

        Args:
            grads_and_vars: Pairs from ``compute_gradients`` (or ``sync_gradients``).
            global_step: Incremented once by the update, if given.
            name: A name scope for the ops.

        Returns:
            The op that applies every pair.
        """
        grads_and_vars = list(grads_and_vars)
        tables = [(g, v) for g, v in grads_and_vars if is_table_rows(v) and g is not None]
        dense = [(g, v) for g, v in grads_and_vars if not is_table_rows(v)]
        step = global_step if global_step is not None else tf.compat.v1.train.get_global_step()
        dense_variables = [v for g, v in dense if g is not None]
        context = self.begin_step(dense_variables, tables)
        with tf.name_scope(name or "apply_tables"):
            updates = self.table_updates(tables, step, context)
        # A loss that reads only tables, in a graph with other trainable variables, trains the tables (as TFRA
        # does): the wrapped optimizer, which refuses pairs that all lack a gradient, gets none then.
        if dense_variables or (dense and not tables):
            with tf.control_dependencies(updates):
                return self.optimizer.apply_gradients(dense, global_step=global_step, name=name)
        with tf.control_dependencies(updates):
            finished = self.rule.finish(context, False) if tables else []
            if global_step is not None:
                finished.append(tf.compat.v1.assign_add(global_step, 1).op)
            return tf.group(*finished)

    def begin_step(self, dense_variables, table_pairs) -> dict:
        """The row rule's values for one step (Adam's beta powers), placed as the wrapped optimizer places its own."""
        if not table_pairs:
            return {}
        if dense_variables:
            anchor = min(dense_variables, key=lambda v: v.name)
        else:
            anchor = _table_of(table_pairs[0][1]).shards[0].rows.handle
        return self.rule.begin(anchor)

    def table_updates(self, pairs, global_step, context=None) -> list:
        """The ops applying (gradient, TableRows) pairs: one update per group shard, every table's ids in it.

        Args:
            pairs: (gradient, TableRows) pairs, or (mean gradient, ShardRows) pairs from sync aggregation.
            global_step: The global step the rows are marked as seen at (see ``seen_at``).
            context: ``begin_step``'s values; made here when not given.

        Returns:
            One update op per group shard the step touches.
        """
        if context is None:
            context = self.begin_step([], pairs)
        by_shard, by_group = {}, {}
        for records in _by_table([(g, v) for g, v in pairs if isinstance(v, TableRows)]).values():
            table = records[0][0].table
            by_group.setdefault(id(table.group), (table.group, []))[1].append((table, *apply.merged(records)))
        for group, table_steps in by_group.values():
            apply.add_group(by_shard, group, table_steps)
        for mean, rows in [(g, v) for g, v in pairs if isinstance(v, ShardRows)]:
            # The sync accumulators' mean of the replicas' [gradient, count] rows, by id, for one table's shard.
            table = rows.table
            ids = tf.ensure_shape(mean.indices, [None])
            grads, counts = sync_pairs.split_values(table, tf.ensure_shape(mean.values, [None, table.dim + 1]))
            by_shard.setdefault(rows.shard, apply.ShardUpdate()).add(table, ids, keys.hash64(ids), grads, counts)
        step = seen_at(global_step)
        return [apply.apply_shard(shard, self.rule, update, step, context) for shard, update in by_shard.items()]

    def minimize(self, loss, global_step=None, var_list=None, name=None, **kwargs) -> tf.Operation:
        """``compute_gradients`` then ``apply_gradients``, as ``tf.compat.v1.train.Optimizer.minimize``.

        Args:
            loss: A scalar loss tensor.
            global_step: Incremented once by the update, if given.
            var_list: The variables to train; by default every trainable variable.
            name: A name scope for the ops.
            **kwargs: Passed to the wrapped optimizer's ``compute_gradients``.

        Returns:
            The training op.
        """
        return self.apply_gradients(self.compute_gradients(loss, var_list, **kwargs), global_step, name)


def _ops_reaching(tensor: tf.Tensor) -> set:
    """Every op ``tensor`` depends on (through data and control inputs)."""
    seen, stack = set(), [tensor.op]
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return seen


def seen_at(global_step) -> tf.Tensor:
    """The int64 time an update marks its ids as last seen at: the global step, or the wall-clock second without one.

    A graph with no global step (TFRA's scripts and tests train with bare ``minimize()``) still orders its ids
    by recency, as TFRA's timestamp policy did with the wall clock, instead of marking every id seen at 0.
    """
    if global_step is not None:
        return tf.cast(global_step, tf.int64)
    return tf.cast(tf.floor(tf.timestamp()), tf.int64)
