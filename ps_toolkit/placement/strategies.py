"""Device functions that place variables on ps tasks, and a report of where they went."""

from __future__ import annotations

import collections
import dataclasses

import tensorflow as tf

from ps_toolkit.base import user_calls
from ps_toolkit.base.errors import ConfigError
from ps_toolkit.cluster.config import ClusterConfig
from ps_toolkit.placement import registry
from ps_toolkit.placement.ps_strategies import byte_size_load_fn

# The op types that own a variable's storage; reads and updates are colocated with them.
VARIABLE_OPS = ("VariableV2", "VarHandleOp")


def device_setter(cluster: ClusterConfig, strategy: str | registry.PlacementStrategy = "round_robin", *, seed: int = 0):
    """A device function for ``tf.compat.v1.device``: variables on ps, ops on this task.

    Example:
        with tf.compat.v1.device(device_setter(config, "greedy")):
            logits = my_model(features)

    Args:
        cluster: The cluster and this task's place in it.
        strategy: How variables are spread over ps tasks: the name of a registered strategy
            (``registry.STRATEGIES.names()``), or a strategy function ``(num_ps, seed)`` itself.
        seed: Seed of the "random" strategy (and the second argument of every strategy);
            every worker must pass the same one.

    Returns:
        A device function. With no ps tasks, it puts every op on this task.

    Raises:
        ConfigError: ``strategy`` is a name no strategy is registered under, or the strategy raised or
            returned something that is not a ps_strategy.
    """
    make = registry.STRATEGIES.get(strategy, "the placement strategy") if isinstance(strategy, str) else strategy
    if cluster.num_ps == 0:
        # replica_device_setter returns None here, and tf.device(None) would
        # clear outer device scopes instead of pinning ops to this task.
        return _worker_device_function(cluster.device)
    given = f"--placement={strategy if isinstance(strategy, str) else _reference(strategy)}"
    ps_strategy = user_calls.call(make, given, cluster.num_ps, seed)
    if ps_strategy is not None and not callable(ps_strategy):
        raise ConfigError(f"{given}: returned {type(ps_strategy).__name__}, not a ps_strategy (op -> ps index) or None")
    return tf.compat.v1.train.replica_device_setter(
        cluster=cluster.cluster_spec(), worker_device=cluster.device, ps_strategy=ps_strategy
    )


def _reference(function) -> str:
    """``module:name`` of a function, as --placement names one."""
    return f"{getattr(function, '__module__', '?')}:{getattr(function, '__name__', function)}"


def _worker_device_function(worker_device: str):
    worker = tf.DeviceSpec.from_string(worker_device)

    def device_function(op):
        # Fields the op already has win, as in replica_device_setter's merge.
        return worker.make_merged_spec(tf.DeviceSpec.from_string(op.device or "")).to_string()

    return device_function


def variable_partitioner(cluster: ClusterConfig, min_slice_bytes: int = 64 << 10):
    """A partitioner that splits variables along axis 0 over at most ``cluster.num_ps`` shards.

    Unlike ``tf.compat.v1.min_max_variable_partitioner``, which rounds the shard
    count up, no shard is ever smaller than ``min_slice_bytes``.

    Example:
        with tf.compat.v1.variable_scope("embed", partitioner=variable_partitioner(config)):
            table = tf.compat.v1.get_variable("table", [100_000, 64])

    Returns:
        A partitioner for ``get_variable``/``variable_scope``, or None with at most one ps task.
    """
    if cluster.num_ps <= 1:
        return None

    def partitioner(shape, dtype):
        shape = tf.TensorShape(shape)
        rows = shape.dims[0]
        row_bytes = shape[1:].num_elements() * tf.as_dtype(dtype).size
        shards = min(cluster.num_ps, rows)
        # Axis-0 shards differ by at most one row; the smallest has rows // shards.
        while shards > 1 and (rows // shards) * row_bytes < min_slice_bytes:
            shards -= 1
        return [shards] + [1] * (shape.rank - 1)

    return partitioner


@dataclasses.dataclass(frozen=True)
class PlacementReport:
    """Where a graph's variables live and how evenly bytes are spread over ps tasks.

    Attributes:
        variables: (op name, '/job:x/task:n' or '' if unplaced, bytes) per variable op.
        bytes_per_task: Bytes on each ps task, keyed '/job:ps/task:0'; empty tasks included.
        imbalance: Max over mean of ``bytes_per_task``; 1.0 is perfect (and when no bytes).
    """

    variables: tuple[tuple[str, str, int], ...]
    bytes_per_task: dict[str, int]
    imbalance: float

    def format(self) -> str:
        """A short table: one line per ps task, then the imbalance."""
        total = sum(self.bytes_per_task.values())
        lines = [f"{'ps task':<24} {'variables':>9} {'bytes':>15} {'share':>7}"]
        for task, size in self.bytes_per_task.items():
            count = sum(1 for _, device, _ in self.variables if device == task)
            share = size / total if total else 0.0
            lines.append(f"{task:<24} {count:>9} {size:>15,} {share:>7.1%}")
        # Variables a replica keeps for itself (an evaluation's metric totals, a sync local step).
        elsewhere = collections.Counter(device for _, device, _ in self.variables if device not in self.bytes_per_task)
        if elsewhere:
            where = ", ".join(f"{count} on {device or 'no device'}" for device, count in sorted(elsewhere.items()))
            lines.append(f"{sum(elsewhere.values())} variable op(s) not on a ps task: {where}")
        lines.append(f"imbalance (max/mean bytes): {self.imbalance:.2f}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """The report as JSON-ready data."""
        return {
            "variables": [{"name": n, "device": d, "bytes": b} for n, d, b in self.variables],
            "bytes_per_task": dict(self.bytes_per_task),
            "imbalance": self.imbalance,
        }


def placement_report(graph=None, ps_job: str = "ps", num_ps: int | None = None) -> PlacementReport:
    """Reports which task holds each variable op of ``graph`` and how many bytes.

    Args:
        graph: The graph to walk; the default graph if None.
        ps_job: Job name of the ps tasks.
        num_ps: Number of ps tasks, so that empty ones are listed; if None,
            inferred from the highest ps task index holding a variable.

    Returns:
        A PlacementReport. Variables of unknown shape count as 0 bytes.
    """
    graph = tf.compat.v1.get_default_graph() if graph is None else graph
    variables = tuple(
        (op.name, _task_of(op.device), _bytes_or_zero(op)) for op in graph.get_operations() if op.type in VARIABLE_OPS
    )
    on_ps = {}  # ps task index -> bytes
    for _, device, size in variables:
        spec = tf.DeviceSpec.from_string(device)
        if spec.job == ps_job and spec.task is not None:
            on_ps[spec.task] = on_ps.get(spec.task, 0) + size
    count = num_ps if num_ps is not None else max(on_ps, default=-1) + 1
    indices = sorted(set(range(count)) | set(on_ps))
    bytes_per_task = {f"/job:{ps_job}/task:{i}": on_ps.get(i, 0) for i in indices}
    total = sum(on_ps.values())
    imbalance = max(on_ps.values()) * len(indices) / total if total else 1.0
    return PlacementReport(variables, bytes_per_task, imbalance)


def _task_of(device: str) -> str:
    spec = tf.DeviceSpec.from_string(device or "")
    if spec.job is None:
        return ""
    return f"/job:{spec.job}" + ("" if spec.task is None else f"/task:{spec.task}")


def _bytes_or_zero(op) -> int:
    # A report must not fail the job it describes over one variable of unknown shape.
    try:
        return byte_size_load_fn(op)
    except ValueError:
        return 0


def log_placement_report(report: PlacementReport, logger) -> None:
    """Logs ``report.format()`` at INFO, one record per line so task prefixes stay aligned."""
    for line in report.format().splitlines():
        logger.info("%s", line)
