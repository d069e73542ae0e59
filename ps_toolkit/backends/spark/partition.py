"""A Spark launch's input from a DataFrame: each replica's partition of it, as TensorFlowOnSpark's InputMode.SPARK.

The driver deals the DataFrame's rows round-robin over the replicas (chief and
workers; the ps get none) in the same barrier stage that runs the tasks; each
barrier task writes its rows, column by column, to a ``.npz`` file beside it and
names it to its TF task in ``PARTITION_ENV``. The task's input_fn reads it:

    from ps_toolkit.backends.spark.partition import partition_dataset

    def input_fn(input_context):
        return partition_dataset(label="y").shuffle(1024).repeat().batch(input_context.get_per_replica_batch_size())

A partition is held in the executor's memory while it is written, and in the
task's while it trains: a DataFrame for this input is one whose share per
replica fits there (as it was for InputMode.SPARK's queues).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

PARTITION_ENV = "PS_TOOLKIT_SPARK_PARTITION"


def write_partition(rows: Iterable, path: str) -> int:
    """Writes Spark ``Row`` s (or mappings) column by column to ``path`` (.npz); the number of rows."""
    import numpy as np

    columns: dict[str, list] = {}
    count = 0
    for row in rows:
        record = row.asDict() if hasattr(row, "asDict") else dict(row)
        for name, value in record.items():
            columns.setdefault(name, []).append(value)
        count += 1
    np.savez(path, **{name: np.asarray(values) for name, values in columns.items()})
    return count


def read_partition(path: str | None = None) -> Mapping:
    """This task's partition as {column: numpy array}; ``path`` defaults to the one the launch named.

    Raises:
        ConfigError: the task was not started by a Spark launch given a DataFrame, or its file is unreadable.
    """
    import numpy as np

    from ps_toolkit.base.errors import ConfigError

    path = path or os.environ.get(PARTITION_ENV)
    if not path:
        raise ConfigError(f"no Spark partition: {PARTITION_ENV} is unset (give ps-launch-spark --input_path)")
    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    except (OSError, ValueError) as err:
        raise ConfigError(f"{PARTITION_ENV}={path}: cannot read the partition: {err}") from None


def partition_dataset(label: str, path: str | None = None):
    """This task's partition as a ``tf.data.Dataset`` of (features dict, label), one element per row.

    Raises:
        ConfigError: no partition, or no column ``label`` in it.
    """
    import tensorflow as tf

    from ps_toolkit.base.errors import ConfigError

    columns = dict(read_partition(path))
    if label not in columns:
        raise ConfigError(f"the Spark partition has no column {label!r}; columns: {', '.join(sorted(columns))}")
    labels = columns.pop(label)
    return tf.data.Dataset.from_tensor_slices((columns, labels))
