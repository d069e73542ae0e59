"""TFRA scripts look tables up with no model_fn around them: a graph's lookups are read together before it runs.

``embedding_lookup`` marks its graph (``lookup_batches.defer_until_run``); the
first time the graph runs or is finalized after lookups were made, they are
read, one request per ps for all the tables of a group. Every session's
``run`` and ``make_callable`` and ``Graph.finalize`` read first; a graph that
ran by another route fails the step, naming the table, instead of reading
zeros (ps_toolkit.dynamic_embedding.lookup_batches).
"""

from __future__ import annotations

import functools
import threading

import tensorflow as tf

from ps_toolkit.dynamic_embedding import lookup_batches
from ps_toolkit_compat import tf_internals

_INSTALL_LOCK = threading.Lock()
_installed = False


def defer_lookups(graph) -> None:
    """Lookups made next in ``graph`` at its top level are read together before it next runs."""
    install()
    lookup_batches.defer_until_run(graph)


def install() -> None:
    """Makes every session's ``run`` and ``make_callable`` and ``Graph.finalize`` read first; idempotent.

    Called when the TFRA layer is imported, before any lookup: ``sess.run(de.embedding_lookup(...))``
    takes the bound ``run`` before its argument makes the first lookup, so a patch made by that
    lookup would come too late for its own run.
    """
    global _installed
    with _INSTALL_LOCK:
        if _installed:
            return
        session_class = tf_internals.base_session_class()
        session_class.run = _reading_first(session_class.run, lambda session: session.graph)
        session_class.make_callable = _reading_first(session_class.make_callable, lambda session: session.graph)
        tf.Graph.finalize = _reading_first(tf.Graph.finalize, lambda graph: graph)
        _installed = True


def _reading_first(method, graph_of):
    @functools.wraps(method)
    def reading_first(self, *args, **kwargs):
        lookup_batches.read_deferred(graph_of(self))
        return method(self, *args, **kwargs)

    return reading_first
