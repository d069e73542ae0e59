"""ps_strategy callables for replica_device_setter: by bytes so far (greedy) and by a hash of the op's name (random)."""

from __future__ import annotations

import hashlib

import tensorflow as tf


class GreedyLoadBalancingStrategy:
    """Puts each variable on the ps task with the least load so far (ties: lowest index).

    The result depends on the order variables are created in. A variable made
    under ``colocate_with`` (optimizer slots) or pinned to a ps task is still
    offered to the strategy, but TensorFlow then moves it; its load is charged
    to the task it really went to before the next choice is made.

    Example:
        strategy = GreedyLoadBalancingStrategy(2, byte_size_load_fn)
        tf.compat.v1.train.replica_device_setter(cluster=spec, ps_strategy=strategy)

    Args:
        num_tasks: Number of ps tasks.
        load_fn: Callable(op) -> load of the op, in any consistent unit.
        ps_job: Job name of the ps tasks, to read where an op really went.
    """

    def __init__(self, num_tasks: int, load_fn, *, ps_job: str = "ps"):
        self._load_fn = load_fn
        self._ps_job = ps_job
        self._loads = [0] * num_tasks
        self._last = None  # (op, chosen task, load) of the op placed most recently

    def __call__(self, op) -> int:
        """The ps task index for variable op ``op``: the least loaded so far."""
        self._settle_last()
        task = min(range(len(self._loads)), key=self._loads.__getitem__)
        load = self._load_fn(op)
        self._loads[task] += load
        self._last = (op, task, load)
        return task

    def _settle_last(self) -> None:
        # Colocation and explicit pins are applied after the device function
        # returns, so the previous op's final device is only known now.
        if self._last is None:
            return
        op, chosen, load = self._last
        actual = tf.DeviceSpec.from_string(op.device or "")
        if actual.job == self._ps_job and actual.task == chosen:
            return
        self._loads[chosen] -= load
        if actual.job == self._ps_job and actual.task is not None and actual.task < len(self._loads):
            self._loads[actual.task] += load


def byte_size_load_fn(op) -> int:
    """Bytes of the variable created by ``op`` (VariableV2 or VarHandleOp, or their NodeDef).

    Raises:
        ValueError: ``op`` has no shape and dtype attrs, or its shape is not fully defined.
    """
    node_def = op if isinstance(op, tf.compat.v1.NodeDef) else op.node_def
    if "shape" not in node_def.attr or "dtype" not in node_def.attr:
        raise ValueError(f"op {node_def.name!r} ({node_def.op}) is not a variable op: no shape/dtype attrs")
    shape = tf.TensorShape(node_def.attr["shape"].shape)
    if not shape.is_fully_defined():
        raise ValueError(f"variable op {node_def.name!r} has shape {shape}: its size in bytes is unknown")
    return shape.num_elements() * tf.as_dtype(node_def.attr["dtype"].type).size


class RandomStrategy:
    """Places each variable on a ps task chosen by a hash of its op name and a seed.

    Every worker computes the same placement: the hash is SHA-256, not Python's
    per-process ``hash()``.

    Example:
        tf.compat.v1.train.replica_device_setter(cluster=spec, ps_strategy=RandomStrategy(3, seed=7))
    """

    def __init__(self, num_tasks: int, seed: int = 0):
        self._num_tasks = num_tasks
        self._seed = seed

    def __call__(self, op) -> int:
        """The ps task index for variable op ``op``: a hash of its name and the seed."""
        digest = hashlib.sha256(f"{self._seed}:{op.name}".encode()).digest()
        return int.from_bytes(digest[:8], "big") % self._num_tasks
