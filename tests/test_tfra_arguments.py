"""TFRA Variable arguments the tables do not take: a ValueError naming the value, as TFRA raises."""

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
