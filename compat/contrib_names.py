"""The ``tf.contrib`` names whose implementation TensorFlow 2.21 still has: lookup, framework, learn datasets.

Each member is TensorFlow's own code under its TF 1.x contrib name (or, for the
few contrib helpers that were a line over a collection, that line), so an old
script's ``tf.contrib.lookup.index_table_from_tensor(...)`` builds the same ops
it built on TF 1.x. ``compat.contrib`` puts them in the ``tf.contrib``
namespaces; layers, losses and metrics are in ``compat.contrib_layers``.
"""

from __future__ import annotations

import tensorflow as tf

from ps_toolkit_compat import contrib_learn_datasets, tf_internals

_v1 = tf.compat.v1

LOOKUP = {name: tf_internals.lookup_function(name) for name in tf_internals.LOOKUP_FUNCTIONS}
LOOKUP.update(
    {
        "KeyValueTensorInitializer": _v1.lookup.KeyValueTensorInitializer,
        "TextFileInitializer": _v1.lookup.TextFileInitializer,
        "TextFileIndex": _v1.lookup.TextFileIndex,
        "MutableHashTable": _v1.lookup.experimental.MutableHashTable,
        "string_to_index_table_from_tensor": tf_internals.lookup_function("index_table_from_tensor"),
    }
)


def get_variables(scope=None, suffix=None, collection=_v1.GraphKeys.GLOBAL_VARIABLES):
    """The variables of ``collection`` under ``scope`` whose name ends with ``suffix`` (contrib.framework)."""
    if isinstance(scope, _v1.VariableScope):
        scope = scope.name
    pattern = scope if suffix is None else f"{scope or ''}.*{suffix}"
    return _v1.get_collection(collection, pattern)


def get_model_variables(scope=None, suffix=None):
    return get_variables(scope, suffix, _v1.GraphKeys.MODEL_VARIABLES)


def get_local_variables(scope=None, suffix=None):
    return get_variables(scope, suffix, _v1.GraphKeys.LOCAL_VARIABLES)


def get_trainable_variables(scope=None, suffix=None):
    return get_variables(scope, suffix, _v1.GraphKeys.TRAINABLE_VARIABLES)


def get_variables_by_name(given_name, scope=None):
    """Variables whose name (without the ``:0``) ends with ``/given_name`` or is ``given_name``."""
    return get_variables(scope=scope, suffix=f"/{given_name}:|^{given_name}:")


def get_unique_variable(var_op_name):
    """The one variable named ``var_op_name``; ValueError if none, as contrib.framework raised."""
    found = [v for v in _v1.get_collection(_v1.GraphKeys.GLOBAL_VARIABLES, var_op_name) if v.op.name == var_op_name]
    if not found:
        raise ValueError(f"Couldn't find variable {var_op_name}")
    return found[0]


def local_variable(initial_value, validate_shape=True, name=None, use_resource=None):
    """A variable in LOCAL_VARIABLES, not trained and not saved (contrib.framework)."""
    return _v1.Variable(
        initial_value,
        trainable=False,
        collections=[_v1.GraphKeys.LOCAL_VARIABLES],
        validate_shape=validate_shape,
        name=name,
        use_resource=use_resource,
    )


def model_variable(name, shape=None, dtype=tf.float32, initializer=None, regularizer=None, trainable=True, **kwargs):
    """A variable also in MODEL_VARIABLES (contrib.framework's ``model_variable``)."""
    collections = list(kwargs.pop("collections", None) or [_v1.GraphKeys.GLOBAL_VARIABLES])
    collections.append(_v1.GraphKeys.MODEL_VARIABLES)
    return _v1.get_variable(
        name,
        shape=shape,
        dtype=dtype,
        initializer=initializer,
        regularizer=regularizer,
        trainable=trainable,
        collections=collections,
        **kwargs,
    )


FRAMEWORK = {
    "get_or_create_global_step": _v1.train.get_or_create_global_step,
    "get_global_step": _v1.train.get_global_step,
    "create_global_step": _v1.train.create_global_step,
    "assert_global_step": _v1.train.assert_global_step,
    "get_variables": get_variables,
    "get_model_variables": get_model_variables,
    "get_local_variables": get_local_variables,
    "get_trainable_variables": get_trainable_variables,
    "get_variables_by_name": get_variables_by_name,
    "get_unique_variable": get_unique_variable,
    "local_variable": local_variable,
    "model_variable": model_variable,
    "add_model_variable": lambda var: _v1.add_to_collection(_v1.GraphKeys.MODEL_VARIABLES, var),
    "is_tensor": tf.is_tensor,
    "nest": tf.nest,
}


# tf.contrib.learn.datasets (compat/contrib_learn_datasets.py).
LEARN_DATASETS = contrib_learn_datasets.MEMBERS
