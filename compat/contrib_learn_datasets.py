"""``tf.contrib.learn.datasets``: ``DATASETS``, ``load_dataset`` and ``mnist``, on the compat layer's local MNIST files.

TF 1.x scripts of the contrib era load MNIST three ways, all served here by
``compat.mnist_input_data`` (the local IDX gzip files; nothing is downloaded):

    mnist = tf.contrib.learn.datasets.DATASETS["mnist"]("/tmp/data")      # kubeflow's mnist example
    mnist = tf.contrib.learn.datasets.load_dataset("mnist")               # reads MNIST-data/, TF 1.x's default
    mnist = tf.contrib.learn.datasets.mnist.read_data_sets("/tmp/data")   # or .load_mnist("/tmp/data")

TF 1.x's other datasets (iris, boston, dbpedia) were downloaded or bundled with
TensorFlow; asking for one is a one-line error naming it.
"""

from __future__ import annotations

import types

from ps_toolkit.base.errors import ConfigError
from ps_toolkit_compat import mnist_input_data
from ps_toolkit_compat.removed import RemovedSymbolError

# TF 1.x's load_mnist's default folder, relative to the working directory.
DEFAULT_MNIST_DIR = "MNIST-data"
# The datasets TF 1.x's DATASETS held that are not here.
NOT_PROVIDED = ("iris", "boston", "dbpedia")


class DatasetNotProvidedError(ConfigError, ValueError, KeyError):
    """A tf.contrib.learn dataset other than mnist: one line (run_legacy.py, exit 2), still the error TF 1.x raised.

    load_dataset raised ValueError for an unknown name and ``DATASETS[name]`` a KeyError: both still catch it.
    """

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


def load_mnist(train_dir: str = DEFAULT_MNIST_DIR):
    """TF 1.x's ``contrib.learn.datasets.mnist.load_mnist``: ``read_data_sets(train_dir)``."""
    return mnist_input_data.read_data_sets(train_dir)


def _not_provided(name) -> DatasetNotProvidedError:
    known = f"; TF 1.x downloaded or bundled {name!r}" if name in NOT_PROVIDED else ""
    return DatasetNotProvidedError(
        f"tf.contrib.learn.datasets: dataset {name!r} is not in the compat layer{known}; it provides 'mnist' "
        "only, read from local MNIST IDX files"
    )


class _Datasets(dict):
    """TF 1.x's ``DATASETS`` dict: name -> loader; a name it does not provide is a one-line error."""

    def __missing__(self, name):
        raise _not_provided(name)


DATASETS = _Datasets(mnist=load_mnist)


def load_dataset(name, size="small", test_with_fake_data=False):
    """TF 1.x's ``load_dataset``: ``DATASETS[name]()`` (mnist from ``MNIST-data``)."""
    del size, test_with_fake_data  # dbpedia's arguments; mnist takes neither
    if name not in DATASETS:
        raise _not_provided(name)
    return DATASETS[name]()


class _MnistModule(types.ModuleType):
    """``tf.contrib.learn.datasets.mnist``: TF 1.x's reader names; a name it lacks is a one-line error."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise RemovedSymbolError(f"contrib.learn.datasets.mnist.{name}")


mnist = _MnistModule("tensorflow.contrib.learn.datasets.mnist")
mnist.__dict__.update(
    read_data_sets=mnist_input_data.read_data_sets,
    load_mnist=load_mnist,
    DataSet=mnist_input_data.DataSet,
    dense_to_one_hot=mnist_input_data.dense_to_one_hot,
)

MEMBERS = {"DATASETS": DATASETS, "load_dataset": load_dataset, "mnist": mnist}
