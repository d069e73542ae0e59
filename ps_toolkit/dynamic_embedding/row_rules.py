"""The update each TF1 optimizer makes to a table's rows, as TensorFlow's sparse apply ops make it to touched rows.

A ``RowRule`` knows an optimizer's slots (name, initial value) and computes
the new rows and slots of the ids a step touched from their current values
and their summed gradient: the formulas of ``ResourceSparseApply*`` (lazy:
rows not touched keep their slots as they are, as Adam's own sparse update
does not; for a row touched at every step the two agree).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import tensorflow as tf

from ps_toolkit.base import tf_internals
from ps_toolkit.base.errors import ConfigError

SUPPORTED = (
    "GradientDescent, Momentum, Adagrad, Adam, Ftrl, RMSProp, Adadelta, AdagradDA, ProximalAdagrad, "
    "ProximalGradientDescent (tf.compat.v1.train)"
)


def _no_context(anchor) -> dict:
    return {}


def _nothing_to_finish(context, dense_applied: bool) -> list:
    return []


@dataclasses.dataclass(frozen=True)
class RowRule:
    """An optimizer's row update: ``update(rows, slots, grads, step, context) -> (rows, slots)``.

    ``slots``: name -> initial value. ``begin(anchor)`` makes the values one step's updates share
    (``context``), before any of them, beside ``anchor`` (the first dense variable by name, as TF1's
    optimizers place their non-slot variables, else a table's hash table); ``finish(context, dense_applied)`` the
    ops that end the step once every table is updated (the wrapped optimizer's own finish runs
    instead when it applied dense variables).
    """

    name: str
    slots: dict
    update: Callable
    begin: Callable = _no_context
    finish: Callable = _nothing_to_finish


def rule_for(optimizer) -> RowRule:
    """The RowRule of a ``tf.compat.v1.train`` optimizer; a ConfigError naming any other."""
    found = tf_internals.optimizer_hyperparameters(optimizer)
    if found is None:
        raise ConfigError(f"dynamic tables cannot be trained by {type(optimizer).__name__}; supported: {SUPPORTED}")
    class_name, hyper = found
    if class_name == "AdamOptimizer":
        return _adam(hyper, optimizer)
    return _MAKERS[class_name](hyper)


def _value(value, dtype) -> tf.Tensor:
    return tf.cast(value() if callable(value) else value, dtype)


def _sgd(hyper) -> RowRule:
    def update(rows, slots, grads, step, context):
        return rows - _value(hyper["learning_rate"], rows.dtype) * grads, {}

    return RowRule("sgd", {}, update)


def _momentum(hyper) -> RowRule:
    def update(rows, slots, grads, step, context):
        lr, momentum = _value(hyper["learning_rate"], rows.dtype), _value(hyper["momentum"], rows.dtype)
        accum = slots["momentum"] * momentum + grads
        if hyper["use_nesterov"]:
            return rows - lr * grads - lr * momentum * accum, {"momentum": accum}
        return rows - lr * accum, {"momentum": accum}

    return RowRule("momentum", {"momentum": 0.0}, update)


def _adagrad(hyper) -> RowRule:
    def update(rows, slots, grads, step, context):
        accum = slots["accumulator"] + grads * grads
        return rows - _value(hyper["learning_rate"], rows.dtype) * grads * tf.math.rsqrt(accum), {"accumulator": accum}

    return RowRule("adagrad", {"accumulator": float(hyper["initial_accumulator_value"])}, update)


def _adam(hyper, optimizer) -> RowRule:
    # Adam's step count is its beta powers, which the optimizer raises once per apply_gradients: the
    # tables read the same variables (made here if the optimizer has not made them yet), so rows and
    # dense variables share one count, whether or not the training op increments a global step.
    def begin(anchor):
        return {"powers": tf_internals.adam_beta_powers(optimizer, anchor)}

    def update(rows, slots, grads, step, context):
        dtype = rows.dtype
        beta1, beta2 = _value(hyper["beta1"], dtype), _value(hyper["beta2"], dtype)
        beta1_power, beta2_power = (tf.cast(p, dtype) for p in context["powers"])
        lr = _value(hyper["learning_rate"], dtype) * tf.sqrt(1 - beta2_power) / (1 - beta1_power)
        m = slots["m"] * beta1 + (1 - beta1) * grads
        v = slots["v"] * beta2 + (1 - beta2) * grads * grads
        return rows - lr * m / (tf.sqrt(v) + _value(hyper["epsilon"], dtype)), {"m": m, "v": v}

    def finish(context, dense_applied):
        if dense_applied:  # the optimizer's own finish raised the powers
            return []
        beta1_power, beta2_power = context["powers"]
        return [
            beta1_power.assign(beta1_power * _value(hyper["beta1"], beta1_power.dtype), read_value=False),
            beta2_power.assign(beta2_power * _value(hyper["beta2"], beta2_power.dtype), read_value=False),
        ]

    return RowRule("adam", {"m": 0.0, "v": 0.0}, update, begin, finish)


def _ftrl(hyper) -> RowRule:
    if hyper["beta"] or hyper["l2_shrinkage"]:
        raise ConfigError("dynamic tables train Ftrl without beta and l2_shrinkage_regularization_strength")

    def update(rows, slots, grads, step, context):
        dtype = rows.dtype
        lr, power = _value(hyper["learning_rate"], dtype), _value(hyper["learning_rate_power"], dtype)
        l1, l2 = _value(hyper["l1"], dtype), _value(hyper["l2"], dtype)
        accum, linear = slots["accumulator"], slots["linear"]
        new_accum = accum + grads * grads
        sigma = (tf.pow(new_accum, -power) - tf.pow(accum, -power)) / lr
        linear = linear + grads - sigma * rows
        quadratic = tf.pow(new_accum, -power) / lr + 2 * l2
        new_rows = tf.where(tf.abs(linear) > l1, (tf.sign(linear) * l1 - linear) / quadratic, tf.zeros_like(rows))
        return new_rows, {"accumulator": new_accum, "linear": linear}

    return RowRule("ftrl", {"accumulator": float(hyper["initial_accumulator_value"]), "linear": 0.0}, update)


def _rmsprop(hyper) -> RowRule:
    centered = bool(hyper["centered"])

    def update(rows, slots, grads, step, context):
        dtype = rows.dtype
        decay, epsilon = _value(hyper["decay"], dtype), _value(hyper["epsilon"], dtype)
        lr, momentum = _value(hyper["learning_rate"], dtype), _value(hyper["momentum"], dtype)
        rms = decay * slots["rms"] + (1 - decay) * grads * grads
        new = {"rms": rms}
        denominator = rms
        if centered:
            mg = decay * slots["mg"] + (1 - decay) * grads
            new["mg"] = mg
            denominator = rms - mg * mg
        mom = momentum * slots["momentum"] + lr * grads * tf.math.rsqrt(denominator + epsilon)
        new["momentum"] = mom
        return rows - mom, new

    # TF1's RMSProp starts its mean square at 1, not 0.
    slots = {"rms": 1.0, "momentum": 0.0}
    if centered:
        slots["mg"] = 0.0
    return RowRule("rmsprop", slots, update)


def _adadelta(hyper) -> RowRule:
    def update(rows, slots, grads, step, context):
        dtype = rows.dtype
        lr, rho, epsilon = (_value(hyper[k], dtype) for k in ("learning_rate", "rho", "epsilon"))
        accum = rho * slots["accum"] + (1 - rho) * grads * grads
        change = tf.sqrt(slots["accum_update"] + epsilon) * tf.math.rsqrt(accum + epsilon) * grads
        accum_update = rho * slots["accum_update"] + (1 - rho) * change * change
        return rows - lr * change, {"accum": accum, "accum_update": accum_update}

    return RowRule("adadelta", {"accum": 0.0, "accum_update": 0.0}, update)


def _shrunk(values, threshold):
    """``sign(values) * max(|values| - threshold, 0)``: the l1 proximal step (``values`` itself at l1 = 0)."""
    return tf.sign(values) * tf.maximum(tf.abs(values) - threshold, 0)


def _adagrad_da(hyper) -> RowRule:
    def update(rows, slots, grads, step, context):
        dtype = rows.dtype
        lr, l1, l2 = (_value(hyper[k], dtype) for k in ("learning_rate", "l1", "l2"))
        # TF's AdagradDA counts by its own global_step argument, read before the step's increment, plus one.
        global_step = tf.cast(tf.convert_to_tensor(hyper["global_step"]) + 1, dtype)
        accum = slots["gradient_accumulator"] + grads
        squared = slots["gradient_squared_accumulator"] + grads * grads
        new_rows = -lr * _shrunk(accum, l1 * global_step) / (l2 * global_step * lr + tf.sqrt(squared))
        return new_rows, {"gradient_accumulator": accum, "gradient_squared_accumulator": squared}

    initial = {"gradient_accumulator": 0.0, "gradient_squared_accumulator": float(hyper["initial_accumulator_value"])}
    return RowRule("adagrad_da", initial, update)


def _proximal_adagrad(hyper) -> RowRule:
    def update(rows, slots, grads, step, context):
        dtype = rows.dtype
        lr, l1, l2 = (_value(hyper[k], dtype) for k in ("learning_rate", "l1", "l2"))
        accum = slots["accumulator"] + grads * grads
        adjusted_lr = lr * tf.math.rsqrt(accum)
        proximal = _shrunk(rows - adjusted_lr * grads, adjusted_lr * l1)
        return proximal / (1 + l2 * adjusted_lr), {"accumulator": accum}

    return RowRule("proximal_adagrad", {"accumulator": float(hyper["initial_accumulator_value"])}, update)


def _proximal_sgd(hyper) -> RowRule:
    def update(rows, slots, grads, step, context):
        dtype = rows.dtype
        lr, l1, l2 = (_value(hyper[k], dtype) for k in ("learning_rate", "l1", "l2"))
        return _shrunk(rows - lr * grads, lr * l1) / (1 + l2 * lr), {}

    return RowRule("proximal_sgd", {}, update)


_MAKERS = {
    "GradientDescentOptimizer": _sgd,
    "MomentumOptimizer": _momentum,
    "AdagradOptimizer": _adagrad,
    "FtrlOptimizer": _ftrl,
    "RMSPropOptimizer": _rmsprop,
    "AdadeltaOptimizer": _adadelta,
    "AdagradDAOptimizer": _adagrad_da,
    "ProximalAdagradOptimizer": _proximal_adagrad,
    "ProximalGradientDescentOptimizer": _proximal_sgd,
}
