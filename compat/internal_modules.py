"""TensorFlow-internal modules old scripts imported that TF 2.21 moved or dropped, mapped where an equivalent exists.

Registered in ``sys.modules`` by ``legacy_tf.install()`` under their TF 1.x names:

- ``tensorflow.python.data.experimental.ops.threadpool``: ``PrivateThreadPool`` and
  ``override_threadpool(dataset, pool)``, on ``tf.data.Options().threading``'s
  private thread pool (what TF 2 made of it).
- ``tensorflow.python.distribute.all_reduce``: TF 1.x's all-reduce builders where public ops make
  them (compat/all_reduce.py), the others refused in one line.
- Names TF 2.13-2.21 moved between its own modules, back at their TF 1.x place
  (``ops.register_tensor_conversion_function``, ``variables.VariableV1``: tf_internals.MOVED_NAMES).
- ``tensorflow.python.estimator`` and everything below it: the same modules of the tensorflow-estimator
  package, as TF 1.14-2.15 forwarded them (``from tensorflow.python.estimator.model_fn import ModeKeys``).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types

import tensorflow as tf

from ps_toolkit_compat import all_reduce, tf_internals


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


threadpool = types.ModuleType(tf_internals.TF1_THREADPOOL_MODULE, __doc__.splitlines()[0])
threadpool.PrivateThreadPool = PrivateThreadPool
threadpool.override_threadpool = override_threadpool

MODULES = {threadpool.__name__: threadpool, all_reduce.MODULE_NAME: all_reduce.module}


ESTIMATOR_ALIAS = tf_internals.TF1_ESTIMATOR_ALIAS
ESTIMATOR_PACKAGE = tf_internals.ESTIMATOR_PACKAGE


class _AliasLoader(importlib.abc.Loader):
    """Loads a module by returning the module it forwards to (one object under both names)."""

    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        return importlib.import_module(self.target)

    def exec_module(self, module):
        """Nothing to run: the target module ran when it was imported."""


class EstimatorAliasFinder(importlib.abc.MetaPathFinder):
    """Finds ``tensorflow.python.estimator[.X]`` as ``tensorflow_estimator.python.estimator[.X]``, where
    the tensorflow-estimator package is installed (else the import fails as it did without it)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != ESTIMATOR_ALIAS and not fullname.startswith(ESTIMATOR_ALIAS + "."):
            return None
        forwarded = ESTIMATOR_PACKAGE + fullname[len(ESTIMATOR_ALIAS) :]
        try:
            found = importlib.util.find_spec(forwarded)
        except ModuleNotFoundError:
            return None
        if found is None:
            return None
        is_package = found.submodule_search_locations is not None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(forwarded), is_package=is_package)


def install_finders() -> None:
    """Puts the alias finder first on ``sys.meta_path``; idempotent."""
    if not any(isinstance(finder, EstimatorAliasFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, EstimatorAliasFinder())
