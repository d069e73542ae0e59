"""One tensor per parameter server each way per step: packed parameter pulls and gradient pushes.

A between-graph replica moves every variable and every gradient as a tensor
of its own: a RecvTensor RPC for each, with its own rendezvous and
serialization on both ends. For models of a few dense layers that per-tensor
cost, not the bytes, dominates a step. Here each ps concatenates the
variables it holds into one flat tensor, the worker splits it back, and the
gradients travel the same way in reverse, split again on the ps right next to
the variables they update. The values and the update are those of plain SGD.

Only variables up to ``PACK_LIMIT_BYTES`` are packed: a large matrix already
amortises its RPC, and copying it into and out of a packed tensor costs more
than it saves (measured on the 784x4096 matrix of the ``wide`` model: 34.4
against 38.2 steps/s, docs/performance.md).

Example (inside the replica's device scope, variables already created):
    loss, grads_and_vars = packed_transfer.loss_and_gradients(loss_fn, tf.compat.v1.trainable_variables())
    train_op = optimizer.apply_gradients(grads_and_vars, global_step=global_step)
    # loss_fn(custom_getter) must build the model under that variable-scope custom getter
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import tensorflow as tf

PACK_LIMIT_BYTES = 1 << 20


def _groups(variables: Sequence[tf.Variable]) -> list[tuple[str, list]]:
    """(device, variables) to move as one tensor: the small variables of each device together, large ones alone."""
    packed: dict[str, list] = {}
    alone = []
    for variable in variables:
        if variable.shape.num_elements() * variable.dtype.size > PACK_LIMIT_BYTES:
            alone.append((variable.device, [variable]))
        else:
            packed.setdefault(variable.device, []).append(variable)
    return list(packed.items()) + alone


def _sizes(group: list) -> list[int]:
    return [variable.shape.num_elements() for variable in group]


def pull(variables: Sequence[tf.Variable]) -> dict[str, tf.Tensor]:
    """Each variable's current value on this device, fetched as one tensor per ps; keyed by variable name."""
    values = {}
    for device, group in _groups(variables):
        with tf.compat.v1.device(device):
            if len(group) == 1:
                # Read on its ps: a layer that runs beside its weights (layer_placement) finds it there.
                values[group[0].name] = tf.identity(group[0].read_value())
                continue
            flat = tf.concat([tf.reshape(v.read_value(), [-1]) for v in group], axis=0)
        for variable, piece in zip(group, tf.split(flat, _sizes(group)), strict=True):
            values[variable.name] = tf.reshape(piece, variable.shape)
    return values


def reading(values: dict[str, tf.Tensor]) -> Callable:
    """A variable-scope custom getter that hands the model the pulled values instead of the variables."""

    def custom_getter(getter, name, *args, **kwargs):  # TF passes these by keyword
        variable = getter(name, *args, **kwargs)
        if variable.name in values:
            return values[variable.name]
        # A PartitionedVariable, split along axis 0 (placement.variable_partitioner): its parts were pulled.
        return tf.concat([values[part.name] for part in variable], axis=0)

    return custom_getter


def packed_gradients(gradients: Sequence[tf.Tensor], variables: Sequence[tf.Variable]) -> list[tuple]:
    """(gradient, variable) pairs for ``optimizer.apply_gradients``, each gradient sent packed and split on its ps."""
    pairs = []
    by_name = {v.name: g for g, v in zip(gradients, variables, strict=True)}
    for device, group in _groups(variables):
        grads = [tf.convert_to_tensor(by_name[v.name]) for v in group]
        if len(group) == 1:
            pairs.append((grads[0], group[0]))
            continue
        flat = tf.concat([tf.reshape(g, [-1]) for g in grads], axis=0)
        with tf.compat.v1.device(device):
            pieces = tf.split(flat, _sizes(group))
            pairs += [(tf.reshape(p, v.shape), v) for p, v in zip(pieces, group, strict=True)]
    return pairs


def loss_and_gradients(loss_fn: Callable, variables: Sequence[tf.Variable]) -> tuple[tf.Tensor, list[tuple]]:
    """The loss built on packed pulls of ``variables``, and its (gradient, variable) pairs, packed.

    ``loss_fn(custom_getter)`` builds the loss with ``custom_getter`` on its
    variable scope; the variables it does not read are left out of the pairs.
    Each gradient op runs where its forward op ran (TF2's ``tf.gradients``
    always colocates them), so a layer computed beside its weights on the ps
    keeps its backward pass there.
    """
    values = pull(variables)
    loss = loss_fn(reading(values))
    gradients = tf.gradients(loss, [values[v.name] for v in variables])
    used = [(g, v) for g, v in zip(gradients, variables, strict=True) if g is not None]
    return loss, packed_gradients([g for g, _ in used], [v for _, v in used])
