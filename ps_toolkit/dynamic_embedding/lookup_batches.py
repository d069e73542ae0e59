"""Lookups read together: a model's lookups of many tables become one read per group shard.

A lookup made while a batch is open returns a stand-in (an identity of an empty
tensor of unknown length) that the model is built on; when the batch is read,
the lookups of each group are read with one request per ps
(``shard_reads.read_together``) and each stand-in's input becomes its rows. So
a model of a table per feature costs about what a model of one shared table
does, in graph ops and in work per step.

Lookups are read together only when running one never needs more than running
another: those whose ids come from the same feeds and input draws (placeholders,
iterators, queues). A training step thus never draws the evaluation's input nor
needs its placeholders fed. A lookup made in a loop, cond or control-dependency
block other than the batch's is read at once.

Two kinds of batch: ``batched_lookups()`` reads when its block ends
(``call_model_fn`` opens one around every model_fn); ``defer_until_run(graph)``
keeps one open in the graph, read by ``read_deferred(graph)`` before the graph
first runs after the lookups (the TFRA layer calls it from ``Session.run`` and
``Graph.finalize``). A stand-in of a deferred batch that was never read fails
the step that runs it, naming the table; it never gives zero rows.
"""

from __future__ import annotations

import contextlib
import threading
import weakref

import tensorflow as tf

from ps_toolkit.base import tf_internals
from ps_toolkit.dynamic_embedding import shard_reads

# Ops whose output depends on what a run feeds or draws: lookups that depend on different ones are read apart.
_FEEDS = ("Placeholder", "PlaceholderV2")  # a PlaceholderWithDefault needs no feed
_DRAW_PREFIXES = ("Iterator", "MultiDeviceIterator", "Queue", "ReaderRead")
_NOT_READ = "a lookup of dynamic table {name} was never read: its graph ran by a route that reads no deferred lookups"


class _Batch:
    """Lookups waiting to be read together, made in one graph context (loop, cond, control dependencies)."""

    def __init__(self, graph, fail_unread: bool):
        self.graph, self.context = graph, tf_internals.building_context(graph)
        self.fail_unread = fail_unread
        self.pending: list[tuple] = []  # (table, distinct ids, the stand-in's op)

    def stand_in(self, table, unique_ids: tf.Tensor) -> tf.Tensor:
        """The rows of ``unique_ids`` once the batch is read: ``[None, dim]``."""
        empty = tf.zeros([0, table.dim], table.value_dtype)
        if self.fail_unread:
            empty = _failing(empty, _NOT_READ.format(name=table.name))
        # An input of unknown length, so that the read's rows of any length can replace it.
        unknown = tf.compat.v1.placeholder_with_default(empty, [None, table.dim])
        rows = tf.identity(unknown, name="batched_rows")
        self.pending.append((table, unique_ids, rows.op))
        return rows

    def read(self) -> None:
        """Reads every pending lookup, by group and by the inputs its ids depend on; feeds each stand-in.

        A lookup whose ids depend on another pending lookup's rows is read after it, in a later read:
        one read for both would be its own input (a cycle).
        """
        pending, self.pending = self.pending, []
        sources = _InputSources({stand_in for _, _, stand_in in pending})
        waves, together = {}, {}
        for table, ids, stand_in in pending:
            inputs, after = sources.of(ids)
            waves[stand_in] = wave = 1 + max((waves[earlier] for earlier in after), default=-1)
            key = (wave, id(table.group), inputs)
            together.setdefault(key, (table.group, []))[1].append((table, ids, stand_in))
        with tf.name_scope("batched_lookups"):
            # Keys in wave order: a read's ids may use the rows of the waves before it only.
            for key in sorted(together, key=lambda k: k[0]):
                group, lookups = together[key]
                # The ids' side of the read goes where the first lookup was made (its worker).
                with tf.compat.v1.device(lookups[0][2].device or None):
                    rows = shard_reads.read_together(group, [(table, ids) for table, ids, _ in lookups])
                for (_, _, stand_in), part in zip(lookups, rows, strict=True):
                    tf_internals.replace_input(stand_in, 0, part)


class _InputSources:
    """The feeds and input draws each tensor depends on, and the pending stand-ins it uses (memoized over one
    read)."""

    def __init__(self, stand_ins: set):
        self._stand_ins = stand_ins
        self._of_op: dict = {}

    def of(self, tensor: tf.Tensor) -> tuple[frozenset, frozenset]:
        """(the names of the input ops, the pending stand-ins) ``tensor`` depends on, through data and control
        inputs."""
        return self._of(tensor.op)

    def _of(self, op) -> tuple[frozenset, frozenset]:
        # Post-order without recursion (an input pipeline's chain may be longer than Python's limit); an op
        # met again while its inputs are being visited closes a loop's back edge and adds nothing.
        stack, visiting = [(op, False)], set()
        while stack:
            current, inputs_done = stack.pop()
            if current in self._of_op:
                continue
            upstream = [t.op for t in current.inputs] + list(current.control_inputs)
            if not inputs_done:
                if current in visiting:
                    continue
                visiting.add(current)
                stack.append((current, True))
                stack.extend((u, False) for u in upstream if u not in self._of_op)
                continue
            inputs = {current.name} if _is_input(current) else set()
            stand_ins = {current} if current in self._stand_ins else set()
            for u in upstream:
                u_inputs, u_stand_ins = self._of_op.get(u, (frozenset(), frozenset()))
                inputs |= u_inputs
                stand_ins |= u_stand_ins
            self._of_op[current] = (frozenset(inputs), frozenset(stand_ins))
        return self._of_op[op]


def _is_input(op) -> bool:
    return op.type in _FEEDS or op.type.startswith(_DRAW_PREFIXES)


def _failing(empty: tf.Tensor, message: str) -> tf.Tensor:
    """``empty``, computed only after an assertion that fails with ``message``."""
    with tf.control_dependencies([tf.debugging.Assert(tf.constant(False), [message])]):
        return tf.identity(empty)


_STACKS = threading.local()
_DEFERRED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # graph -> its open deferred batch, or None
_READ_LOCK = threading.Lock()  # held by a deferred read and by every run's check for one


@contextlib.contextmanager
def batched_lookups():
    """Inside, lookups of the tables of one group are read together when the block ends.

    A block ended by an exception reads nothing.
    """
    batch = _Batch(tf.compat.v1.get_default_graph(), fail_unread=False)
    stack = _stack()
    stack.append(batch)
    try:
        yield
    finally:
        stack.pop()
    batch.read()


def defer_until_run(graph=None) -> None:
    """Lookups made in ``graph`` outside loops, conds, control dependencies and ``batched_lookups`` blocks
    wait for ``read_deferred``, to be read together (none in a function's graph)."""
    graph = graph or tf.compat.v1.get_default_graph()
    if graph.building_function:
        # A function's graph (a tf.function, a v2 cond's branch or loop's body) is never run by a session nor
        # finalized: its lookups are read at once.
        return
    _DEFERRED.setdefault(graph, None)


def read_deferred(graph) -> None:
    """Reads the lookups of ``graph`` that wait to be read, if any (before a run of the graph).

    A run in another thread (a queue runner's) waits for a read under way: run before the stand-ins are
    joined to their rows, a session would keep the unread graph and fail every step.
    """
    with _READ_LOCK:
        batch = _DEFERRED.get(graph)
        if batch is None or not batch.pending:
            return
        with graph.as_default(), graph.name_scope(None), tf.control_dependencies(None), tf.compat.v1.device(None):
            batch.read()


def open_batch():
    """The batch a lookup made now joins, or None (read it at once)."""
    if tf.executing_eagerly():
        return None
    graph, stack = tf.compat.v1.get_default_graph(), _stack()
    context = tf_internals.building_context(graph)
    if stack:
        batch = stack[-1]
        return batch if batch.graph is graph and batch.context == context else None
    if graph not in _DEFERRED or context != (None, frozenset()):
        return None
    if _DEFERRED[graph] is None:
        _DEFERRED[graph] = _Batch(graph, fail_unread=True)
    return _DEFERRED[graph]


def _stack() -> list:
    if not hasattr(_STACKS, "stack"):
        _STACKS.stack = []
    return _STACKS.stack
