"""The row updates of the Keras ``OptimizerV2`` optimizers in graph mode, as their sparse applies make them.

TFRA trains its tables with ``tensorflow.python.keras.optimizer_v2`` optimizers as well as with
``tf.compat.v1.train`` ones (its own tests do both). These rules follow each optimizer's
``_resource_apply_sparse`` (lazily: rows not touched keep their slots) with its hyperparameters,
its decayed learning rate and its step count ``iterations``, read before the step raises it, as
the optimizer's own apply reads it. Nadam keeps a momentum cache shared by every variable it
trains; it is not among them.
"""

from __future__ import annotations

import tensorflow as tf

from ps_toolkit.base import tf_internals
from ps_toolkit.base.errors import ConfigError
from ps_toolkit.dynamic_embedding.row_rules import RowRule

SUPPORTED = "SGD, Adam, Adagrad, Adadelta, Adamax, Ftrl, RMSprop (Keras OptimizerV2, graph mode)"


def is_keras_optimizer(optimizer) -> bool:
    """Whether ``optimizer`` is a Keras OptimizerV2 (by its API: hyperparameters, iterations, decayed lr)."""
    return all(hasattr(optimizer, name) for name in ("get_slot_names", "iterations", "_hyper", "_decayed_lr"))


def rule_for(optimizer) -> RowRule:
    """The RowRule of a Keras OptimizerV2; a ConfigError naming one without a rule."""
    for cls in type(optimizer).__mro__:
        maker = _MAKERS.get(cls.__name__)
        if maker is not None:
            return maker(optimizer)
    raise ConfigError(f"dynamic tables cannot be trained by {type(optimizer).__name__}; supported: {SUPPORTED}")


def _counting(optimizer, name: str, slots: dict, update) -> RowRule:
    """A rule whose step reads the optimizer's ``iterations + 1`` and, without dense variables, raises it."""

    def begin(anchor):
        return {"local_step": tf.identity(optimizer.iterations) + 1}

    def finish(context, dense_applied):
        return [] if dense_applied else [optimizer.iterations.assign_add(1, read_value=False)]

    return RowRule(name, slots, update, begin, finish)


def _hyper(optimizer, name: str, dtype):
    return tf.identity(tf_internals.keras_hyperparameter(optimizer, name, dtype))


def _sgd(optimizer) -> RowRule:
    with_momentum = bool(tf_internals.keras_setting(optimizer, "_momentum", False))

    def update(rows, slots, grads, step, context):
        lr = tf_internals.keras_decayed_lr(optimizer, rows.dtype)
        if not with_momentum:
            return rows - lr * grads, {}
        momentum = _hyper(optimizer, "momentum", rows.dtype)
        accum = momentum * slots["momentum"] - lr * grads
        if optimizer.nesterov:
            return rows + momentum * accum - lr * grads, {"momentum": accum}
        return rows + accum, {"momentum": accum}

    return _counting(optimizer, "keras_sgd", {"momentum": 0.0} if with_momentum else {}, update)


def _powers(optimizer, context, dtype, *names):
    step = tf.cast(context["local_step"], dtype)
    return [tf.pow(_hyper(optimizer, name, dtype), step) for name in names]


def _adam(optimizer) -> RowRule:
    amsgrad = bool(optimizer.amsgrad)

    def update(rows, slots, grads, step, context):
        dtype = rows.dtype
        beta_1, beta_2 = _hyper(optimizer, "beta_1", dtype), _hyper(optimizer, "beta_2", dtype)
        beta_1_power, beta_2_power = _powers(optimizer, context, dtype, "beta_1", "beta_2")
        lr = tf_internals.keras_decayed_lr(optimizer, dtype) * tf.sqrt(1 - beta_2_power) / (1 - beta_1_power)
        m = slots["m"] * beta_1 + (1 - beta_1) * grads
        v = slots["v"] * beta_2 + (1 - beta_2) * grads * grads
        new = {"m": m, "v": v}
        if amsgrad:
            v = new["vhat"] = tf.maximum(slots["vhat"], v)
        return rows - lr * m / (tf.sqrt(v) + tf.cast(optimizer.epsilon, dtype)), new

    slots = {"m": 0.0, "v": 0.0, **({"vhat": 0.0} if amsgrad else {})}
    return _counting(optimizer, "keras_adam", slots, update)


def _adagrad(optimizer) -> RowRule:
    def update(rows, slots, grads, step, context):
        dtype = rows.dtype
        accum = slots["accumulator"] + grads * grads
        lr = tf_internals.keras_decayed_lr(optimizer, dtype)
        return rows - lr * grads / (tf.sqrt(accum) + tf.cast(optimizer.epsilon, dtype)), {"accumulator": accum}

    initial = float(tf_internals.keras_setting(optimizer, "_initial_accumulator_value"))
    return _counting(optimizer, "keras_adagrad", {"accumulator": initial}, update)


def _adadelta(optimizer) -> RowRule:
    def update(rows, slots, grads, step, context):
        dtype = rows.dtype
        rho, epsilon = _hyper(optimizer, "rho", dtype), tf.cast(optimizer.epsilon, dtype)
        accum = rho * slots["accum_grad"] + (1 - rho) * grads * grads
        change = tf.sqrt(slots["accum_var"] + epsilon) * tf.math.rsqrt(accum + epsilon) * grads
        accum_var = rho * slots["accum_var"] + (1 - rho) * change * change
        lr = tf_internals.keras_decayed_lr(optimizer, dtype)
        return rows - lr * change, {"accum_grad": accum, "accum_var": accum_var}

    return _counting(optimizer, "keras_adadelta", {"accum_grad": 0.0, "accum_var": 0.0}, update)


def _adamax(optimizer) -> RowRule:
    def update(rows, slots, grads, step, context):
        dtype = rows.dtype
        beta_1, beta_2 = _hyper(optimizer, "beta_1", dtype), _hyper(optimizer, "beta_2", dtype)
        (beta_1_power,) = _powers(optimizer, context, dtype, "beta_1")
        m = slots["m"] * beta_1 + (1 - beta_1) * grads
        v = tf.maximum(slots["v"] * beta_2, tf.abs(grads))
        lr = tf_internals.keras_decayed_lr(optimizer, dtype) / (1 - beta_1_power)
        return rows - lr * m / (v + tf.cast(optimizer.epsilon, dtype)), {"m": m, "v": v}

    return _counting(optimizer, "keras_adamax", {"m": 0.0, "v": 0.0}, update)


def _ftrl(optimizer) -> RowRule:
    def update(rows, slots, grads, step, context):
        dtype = rows.dtype
        lr = tf_internals.keras_decayed_lr(optimizer, dtype)
        power = _hyper(optimizer, "learning_rate_power", dtype)
        l1 = _hyper(optimizer, "l1_regularization_strength", dtype)
        # Keras folds its beta into l2, as its apply does.
        l2 = _hyper(optimizer, "l2_regularization_strength", dtype) + _hyper(optimizer, "beta", dtype) / (2 * lr)
        shrinkage = tf.cast(tf_internals.keras_setting(optimizer, "_l2_shrinkage_regularization_strength"), dtype)
        accum, linear = slots["accumulator"], slots["linear"]
        new_accum = accum + grads * grads
        sigma = (tf.pow(new_accum, -power) - tf.pow(accum, -power)) / lr
        linear = linear + grads + 2 * shrinkage * rows - sigma * rows
        quadratic = tf.pow(new_accum, -power) / lr + 2 * l2
        new_rows = tf.where(tf.abs(linear) > l1, (tf.sign(linear) * l1 - linear) / quadratic, tf.zeros_like(rows))
        return new_rows, {"accumulator": new_accum, "linear": linear}

    initial = float(tf_internals.keras_setting(optimizer, "_initial_accumulator_value"))
    return _counting(optimizer, "keras_ftrl", {"accumulator": initial, "linear": 0.0}, update)


def _rmsprop(optimizer) -> RowRule:
    with_momentum = bool(tf_internals.keras_setting(optimizer, "_momentum"))
    centered = bool(optimizer.centered)

    def update(rows, slots, grads, step, context):
        dtype = rows.dtype
        rho, epsilon = _hyper(optimizer, "rho", dtype), tf.cast(optimizer.epsilon, dtype)
        lr = tf_internals.keras_decayed_lr(optimizer, dtype)
        rms = rho * slots["rms"] + (1 - rho) * grads * grads
        new, denominator = {"rms": rms}, rms
        if centered:
            mg = new["mg"] = rho * slots["mg"] + (1 - rho) * grads
            denominator = rms - mg * mg
        if not with_momentum:  # Keras's own update: epsilon outside the root
            return rows - lr * grads / (tf.sqrt(denominator) + epsilon), new
        # With momentum, TF's RMSProp kernels: epsilon inside the root.
        mom = new["momentum"] = _hyper(optimizer, "momentum", dtype) * slots["momentum"] + lr * grads * tf.math.rsqrt(
            denominator + epsilon
        )
        return rows - mom, new

    slots = {"rms": 0.0, **({"momentum": 0.0} if with_momentum else {}), **({"mg": 0.0} if centered else {})}
    return _counting(optimizer, "keras_rmsprop", slots, update)


_MAKERS = {
    "SGD": _sgd,
    "Adam": _adam,
    "Adagrad": _adagrad,
    "Adadelta": _adadelta,
    "Adamax": _adamax,
    "Ftrl": _ftrl,
    "RMSprop": _rmsprop,
}
