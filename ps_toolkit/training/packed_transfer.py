"""One tensor per parameter server each way per step: packed parameter pulls and gradient pushes.

Design: docs/design.md, "One replica's step".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import tensorflow as tf

from ps_toolkit.placement.choices import PACK_LIMIT_BYTES


def packs(variable) -> bool:
    """Whether ``variable`` moves packed: small enough that its own RPC would cost more than its bytes."""
    return variable.shape.num_elements() * variable.dtype.size <= PACK_LIMIT_BYTES


def _groups(variables: Sequence[tf.Variable]) -> list[tuple[str, list]]:
    """(device, variables) to move as one tensor: the small variables of each device together."""
    packed: dict[str, list] = {}
    for variable in variables:
        if packs(variable):
            packed.setdefault(variable.device, []).append(variable)
    return list(packed.items())


def _sizes(group: list) -> list[int]:
    return [variable.shape.num_elements() for variable in group]


def pull(variables: Sequence[tf.Variable]) -> dict[str, tf.Tensor]:
    """The current value of each small variable on this device, fetched as one tensor per ps; keyed by name."""
    values = {}
    for device, group in _groups(variables):
        with tf.compat.v1.device(device):
            flat = tf.concat([tf.reshape(v.read_value(), [-1]) for v in group], axis=0)
        for variable, piece in zip(group, tf.split(flat, _sizes(group)), strict=True):
            values[variable.name] = tf.reshape(piece, variable.shape)
    return values


def reading(values: dict[str, tf.Tensor]) -> Callable:
    """A variable-scope custom getter that hands the model the pulled values of the variables pulled."""

    def custom_getter(getter, name, *args, **kwargs):  # TF passes these by keyword
        variable = getter(name, *args, **kwargs)
        if isinstance(variable, tf.Variable):
            return values.get(variable.name, variable)
        # A PartitionedVariable (no tf.Variable): its parts, split along axis 0 by a partitioner.
        parts = list(variable)
        if all(part.name in values for part in parts):
            return tf.concat([values[part.name] for part in parts], axis=0)
        return variable

    return custom_getter


def packed_gradients(gradients: Sequence[tf.Tensor], variables: Sequence[tf.Variable]) -> list[tuple]:
    """(gradient, variable) pairs for ``optimizer.apply_gradients``, each gradient sent packed and split on its ps."""
    by_name = {v.name: g for g, v in zip(gradients, variables, strict=True)}
    # A large variable's gradient goes as it is: an embedding's stays IndexedSlices, its rows only.
    pairs = [(by_name[v.name], v) for v in variables if not packs(v)]
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
    gradients = tf.gradients(loss, [values.get(v.name, v) for v in variables])
    used = [(g, v) for g, v in zip(gradients, variables, strict=True) if g is not None]
    return loss, packed_gradients([g for g, _ in used], [v for _, v in used])
