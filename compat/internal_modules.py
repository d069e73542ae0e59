"""TensorFlow-internal modules old scripts imported that TF 2.21 moved or dropped, mapped where an equivalent exists.

Registered in ``sys.modules`` by ``legacy_tf.install()`` under their TF 1.x names:

- ``tensorflow.python.data.experimental.ops.threadpool``: ``PrivateThreadPool`` and
  ``override_threadpool(dataset, pool)``, on ``tf.data.Options().threading``'s
  private thread pool (what TF 2 made of it).
"""

from __future__ import annotations

import types

import tensorflow as tf


class PrivateThreadPool:
    """A dataset's own thread pool of ``num_threads`` threads (TF 1.x's class; here its size, applied by
    ``override_threadpool`` through the dataset's options)."""

    def __init__(self, num_threads, display_name=None, max_intra_op_parallelism=1):
        if num_threads < 1:
            raise ValueError(f"num_threads must be at least 1, got {num_threads}")
        self.num_threads = int(num_threads)
        self.display_name = display_name
        self.max_intra_op_parallelism = max_intra_op_parallelism


def override_threadpool(dataset, thread_pool):
    """``dataset`` with its ops run on a private pool of ``thread_pool.num_threads`` threads."""
    options = tf.data.Options()
    options.threading.private_threadpool_size = thread_pool.num_threads
    options.threading.max_intra_op_parallelism = thread_pool.max_intra_op_parallelism
    return dataset.with_options(options)


threadpool = types.ModuleType("tensorflow.python.data.experimental.ops.threadpool", __doc__.splitlines()[0])
threadpool.PrivateThreadPool = PrivateThreadPool
threadpool.override_threadpool = override_threadpool

MODULES = {threadpool.__name__: threadpool}
