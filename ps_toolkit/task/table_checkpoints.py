"""A checkpoint's dynamic-table tensors checked against the model's before any restore, one line per fault.

A table is saved as pairs of tensors, ``<table>/<component>/bucket_NN/keys``
and ``.../values``. A checkpoint whose every tensor reads back intact (CRC
good) can still lack a bucket, hold values of another shape or dtype, or
fewer values than keys: the restore then fails deep in the session with a
traceback that names no table or file. Here each pair the model restores is
compared with the checkpoint's shape and dtype maps (no tensor is read).
"""

from __future__ import annotations

import re

import tensorflow as tf

# A dynamic table's checkpoint key: (the table and component, the bucket, keys or values).
_TABLE_KEY = re.compile(r"^(?P<component>.+)/bucket_(?P<bucket>\d+)/(?P<part>keys|values)$")


def table_specs(graph=None) -> dict[str, tuple[tf.DType, tf.TensorShape]]:
    """{checkpoint key: (dtype, shape)} of every dynamic-table tensor ``graph``'s Saver restores.

    They are the specs of the graph's SAVEABLE_OBJECTS (which a Saver adds to
    the variables) whose names are a bucket's keys or values.
    """
    graph = graph or tf.compat.v1.get_default_graph()
    specs = {}
    for saveable in graph.get_collection(tf.compat.v1.GraphKeys.SAVEABLE_OBJECTS):
        for spec in getattr(saveable, "specs", ()):
            if _TABLE_KEY.match(spec.name):
                specs[spec.name] = (tf.as_dtype(spec.dtype), spec.tensor.shape)
    return specs


def table_faults(prefix: str, specs: dict[str, tuple[tf.DType, tf.TensorShape]]) -> list[str]:
    """What in checkpoint ``prefix`` keeps the model's tables (``specs``, from ``table_specs``) from restoring.

    Each fault names the table tensor and what is wrong with it: missing,
    of another dtype or row shape, keys and values of different lengths, or
    a bucket of a table's component that the model does not have. Empty when
    the tables restore (or the model has none).
    """
    if not specs:
        return []
    reader = tf.compat.v1.train.NewCheckpointReader(prefix)
    shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
    faults = []
    for name, (dtype, shape) in sorted(specs.items()):
        if name not in shapes:
            faults.append(f"{name} is not in the checkpoint")
            continue
        saved_shape, saved_dtype = tf.TensorShape(shapes[name]), tf.as_dtype(dtypes[name])
        if saved_dtype != dtype:
            faults.append(f"{name} is {saved_dtype.name} in the checkpoint, {dtype.name} in the model")
        elif not shape.is_compatible_with(saved_shape):
            faults.append(f"{name} is {saved_shape.as_list()} in the checkpoint; the model's is {_shape_text(shape)}")
    for name in sorted(specs):
        values = name[: -len("keys")] + "values"
        if name.endswith("/keys") and values in specs and name in shapes and values in shapes:
            keys_count, values_count = shapes[name][:1], shapes[values][:1]
            if keys_count != values_count:
                faults.append(
                    f"{name[: -len('/keys')]} holds {keys_count[0] if keys_count else 0} keys but "
                    f"{values_count[0] if values_count else 0} values"
                )
    components = {_TABLE_KEY.match(name)["component"] for name in specs}
    for name in sorted(shapes):
        match = _TABLE_KEY.match(name)
        if match and match["component"] in components and name not in specs:
            faults.append(f"{name} is a bucket the model's table does not have")
    return faults


def _shape_text(shape: tf.TensorShape) -> str:
    return str([dim if dim is not None else "any" for dim in shape.as_list()])
