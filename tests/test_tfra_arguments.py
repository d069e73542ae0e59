"""TFRA Variable arguments the tables do not take: a ValueError naming the value, as TFRA raises."""

import ast

import numpy as np
import pytest
import tensorflow as tf

from ps_toolkit_compat.tfra import variable


@pytest.mark.parametrize("init_size", [-5, -1, 2.5, "100", True, None])
def test_an_init_size_that_is_no_whole_number_from_0_is_a_value_error_naming_it(init_size):
    with tf.Graph().as_default(), pytest.raises(ValueError) as error:
        variable.get_variable("user", dim=2, init_size=init_size)
    message = str(error.value)
    assert "\n" not in message
    assert f"dynamic_embedding.Variable user: init_size={init_size!r} must be an integer >= 0" in message


@pytest.mark.parametrize("init_size", [0, 1000, np.int64(64)])
def test_a_whole_init_size_from_0_is_kept(init_size):
    with tf.Graph().as_default():
        assert variable.get_variable("user", dim=2, init_size=init_size).init_size == int(init_size)


def test_a_key_dtype_tfra_refuses_lists_only_the_dtype_pairs_served():
    with tf.Graph().as_default(), pytest.raises(TypeError) as error:
        variable.get_variable("user", key_dtype=tf.float32, dim=2)
    message = str(error.value)
    assert message.startswith("key-value dtype (float32-float32) is not support! "), message
    pairs = ast.literal_eval(message.split("! ", 1)[1])
    served = {dtype.name for dtype in variable.SERVED_VALUE_DTYPES + variable.STORED_AS_FLOAT64}
    assert ["int64", "float32"] in pairs and ["string", "float32"] in pairs and ["int32", "float32"] in pairs
    refused = [pair for pair in pairs if pair[1] not in served]
    assert not refused, refused  # int64, string and bool values: refused by the layer, never listed
    for key, value in pairs:  # each pair listed is taken
        with tf.Graph().as_default():
            assert variable.get_variable("v", key_dtype=key, value_dtype=value, dim=2).value_dtype.name == value
