"""ps_toolkit: TF1-style parameter-server training on today's TensorFlow.

The public API, re-exported on purpose. Importing this package does not
import TensorFlow; the submodules that need it import it themselves.
"""

from ps_toolkit.api import train
from ps_toolkit.base.errors import ConfigError, RetryableError, ToolkitError
from ps_toolkit.cluster.config import ClusterConfig, resolve
from ps_toolkit.launch.local_cluster import InProcessCluster, LocalCluster, TaskFailedError

# The composition root: the process layer learns the tools' task entries as data, before any launch.
from ps_toolkit.tools import entries as _tool_entries  # noqa: E402 - after the public names it serves
from ps_toolkit.training.config import TrainConfig
from ps_toolkit.training.model_api import InputContext, ModeKeys, ModelDefinition, ModelSpec

_tool_entries.register()


def embedding_lookups(tables, ids, options=None):
    """Rows of each table at its ids, each distinct row moved once, one transfer per ps each way.

    Call it in a model_fn, in place of one ``tf.nn.embedding_lookup`` per table
    (docs/model_fn.md, "Sparse features").

    Args:
        tables: The tables: variables, partitioned variables, or tensors.
        ids: One integer ids tensor per table, of any shape.
        options: A ``training.sparse_lookup.LookupOptions``; by default the training
            step's (``--unique_ids``, ``--group_lookups``, ``--wire_dtype``).

    Returns:
        One tensor per table, of shape ``ids.shape + [dim]``.

    Raises:
        ValueError: ``tables`` and ``ids`` differ in length.
    """
    from ps_toolkit.training import sparse_lookup  # TensorFlow only when a model is built

    return sparse_lookup.embedding_lookups(tables, ids, options)


def batch_indices(context):
    """Batch indices from the global step on, as a dataset: after a restore an input goes past what the model saw.

    Call it in an input_fn whose batch ``i`` is made from ``i`` (and the replica) alone; each iterator
    starts at the global step it finds, so after a ps restart's restore no batch the restored model
    trained on is read again (docs/reliability.md). See ``training.batch_position.batch_indices``.
    """
    from ps_toolkit.training import batch_position  # TensorFlow only when a model is built

    return batch_position.batch_indices(context)


def follow_folder(pattern, context, **options):
    """A dataset of the records of the files matching ``pattern`` as they land, each read once, endless.

    Call it in an input_fn; the position (files done) is saved in the checkpoint, so a restart
    neither skips nor repeats a record (docs/online.md). Options: ``poll_secs``, ``on_bad_file``
    (``skip`` or ``stop``), ``name``; see ``training.folder_input.follow_folder``.
    """
    from ps_toolkit.training import folder_input  # TensorFlow only when a model is built

    return folder_input.follow_folder(pattern, context, **options)


__all__ = [
    "ClusterConfig",
    "ConfigError",
    "InProcessCluster",
    "InputContext",
    "LocalCluster",
    "ModeKeys",
    "ModelDefinition",
    "ModelSpec",
    "RetryableError",
    "TaskFailedError",
    "ToolkitError",
    "TrainConfig",
    "batch_indices",
    "embedding_lookups",
    "follow_folder",
    "resolve",
    "train",
]
__version__ = "0.1.0"
