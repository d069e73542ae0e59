"""``tensorflow.python.distribute.all_reduce``: TF 1.x's graph-built all-reduce module, importable again.

TF 1.x scripts import it at the top (tf_cnn_benchmarks' ``allreduce.py``:
``from tensorflow.python.distribute import all_reduce``) and call it only in
their all-reduce modes; TF 2.21 dropped the module, so the import alone
stopped them. Provided here, from public TensorFlow 2.21 ops:

- ``build_shuffle_all_reduce(input_tensors, gather_devices, red_op, un_op=None)``:
  each input split into one shard per gather device, shard j reduced
  (``red_op``, an n-ary op such as ``tf.add_n``) on gather device j, every
  output the concatenated reduced shards on its input's device (TF 1.x's
  algorithm);
- ``build_nccl_all_reduce(input_tensors, red_op, un_op=None)``: NCCL's
  all-reduce (``tf.raw_ops.NcclAllReduce``; GPUs only, as in TF 1.x), ``red_op``
  one of ``tf.add``, ``tf.multiply``, ``tf.maximum``, ``tf.minimum``.

The others (ring, recursive halving-doubling, the NCCL and shuffle hybrids)
raise ``AllReduceUnavailableError``: one line naming the function and what to
use instead (run_legacy.py: exit 2). A parameter-server update, which
tf_cnn_benchmarks' ``--variable_update=parameter_server`` uses, needs none of them.
"""

from __future__ import annotations

import itertools
import types

import tensorflow as tf

from ps_toolkit.base.errors import ConfigError
from ps_toolkit_compat import tf_internals

MODULE_NAME = tf_internals.ALL_REDUCE_MODULE
NOT_PROVIDED = (
    "build_ring_all_reduce",
    "build_recursive_hd_all_reduce",
    "build_nccl_then_ring",
    "build_nccl_then_recursive_hd",
    "build_nccl_then_shuffle",
    "build_shuffle_then_ring",
    "build_shuffle_then_shuffle",
)
_NCCL_REDUCTIONS = {tf.add: "sum", tf.math.add: "sum", tf.multiply: "prod", tf.maximum: "max", tf.minimum: "min"}
_shared_names = itertools.count()


class AllReduceUnavailableError(ConfigError, NotImplementedError):
    """A TF 1.x all-reduce builder the compat layer does not provide (one line, exit 2 under run_legacy.py)."""


def _flattened(input_tensors):
    if not input_tensors:
        raise ValueError("input_tensors must be a non-empty list of tensors")
    shape = input_tensors[0].shape
    flat = []
    for tensor in input_tensors:
        with tf.compat.v1.colocate_with(tensor):
            flat.append(tf.reshape(tensor, [-1]))
    return flat, shape


def _split_sizes(length: int, pieces: int) -> list[int]:
    """TF 1.x's ragged split: ``pieces`` shards of length // pieces, the last one taking the rest."""
    chunk = length // pieces
    return [chunk] * (pieces - 1) + [length - chunk * (pieces - 1)]


def build_shuffle_all_reduce(input_tensors, gather_devices, red_op, un_op=None):
    """TF 1.x's shuffle all-reduce: reduce shard j on ``gather_devices[j]``, gather every shard on every input's device.

    Args:
        input_tensors: tensors of one shape and dtype, one per device.
        gather_devices: the devices the shards are reduced on.
        red_op: an n-ary elementwise reduction taking a list (``tf.add_n``).
        un_op: an optional unary op applied to each reduced shard.

    Returns:
        One tensor per input, on that input's device, of the input's shape.
    """
    flat, shape = _flattened(list(input_tensors))
    gather_devices = list(gather_devices)
    if not gather_devices:
        raise ValueError("gather_devices must name at least one device")
    length = flat[0].shape[0]
    if length is None:
        raise ValueError("build_shuffle_all_reduce needs tensors of a known size")
    sizes = _split_sizes(int(length), len(gather_devices))
    shards_by_source = []
    for tensor in flat:
        with tf.compat.v1.colocate_with(tensor):
            shards_by_source.append(tf.split(tensor, sizes))
    reduced = []
    for index, device in enumerate(gather_devices):
        with tf.device(device):
            shard = red_op([shards[index] for shards in shards_by_source])
            reduced.append(un_op(shard) if un_op is not None else shard)
    outputs = []
    for tensor in flat:
        with tf.device(tensor.device):
            gathered = tf.concat([tf.identity(shard) for shard in reduced], 0)
            outputs.append(tf.reshape(gathered, shape) if shape.rank != 1 else gathered)
    return outputs


def build_nccl_all_reduce(input_tensors, red_op, un_op=None):
    """TF 1.x's NCCL all-reduce: every output the reduction of all inputs, on its input's device (GPUs only)."""
    input_tensors = list(input_tensors)
    reduction = _NCCL_REDUCTIONS.get(red_op)
    if reduction is None:
        raise ValueError(
            f"build_nccl_all_reduce: red_op={red_op!r}; NCCL reduces with tf.add, tf.multiply, tf.maximum or tf.minimum"
        )
    shared_name = f"ps_toolkit_compat_nccl_all_reduce_{next(_shared_names)}"
    outputs = []
    for tensor in input_tensors:
        with tf.device(tensor.device):
            reduced = tf.raw_ops.NcclAllReduce(
                input=tensor, reduction=reduction, num_devices=len(input_tensors), shared_name=shared_name
            )
            outputs.append(un_op(reduced) if un_op is not None else reduced)
    return outputs


def _refusal(name: str):
    def refuse(*args, **kwargs):
        raise AllReduceUnavailableError(
            f"{MODULE_NAME}.{name}: TF 1.x's graph-built all-reduce was removed from TensorFlow 2.21 and the compat "
            "layer provides only build_shuffle_all_reduce and build_nccl_all_reduce; use one of them, "
            "tf.distribute.MirroredStrategy, or a parameter-server variable update"
        )

    refuse.__name__ = name
    return refuse


class AllReduceNameError(ConfigError, AttributeError):
    """A name TF 1.x's all_reduce module may have had that this one lacks; an AttributeError, so hasattr works."""


class _AllReduceModule(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise AllReduceNameError(f"{MODULE_NAME}.{name} is not in the compat layer's all_reduce module")


module = _AllReduceModule(MODULE_NAME, __doc__.splitlines()[0])
module.build_shuffle_all_reduce = build_shuffle_all_reduce
module.build_nccl_all_reduce = build_nccl_all_reduce
for _name in NOT_PROVIDED:
    setattr(module, _name, _refusal(_name))
