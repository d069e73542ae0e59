"""Environment errors' one line carries the OS error itself, wherever TensorFlow's message puts it."""

from __future__ import annotations

import os
import subprocess

import pytest
import tensorflow as tf

from ps_toolkit.base import environment_errors
from ps_toolkit.base.errors import EnvironmentProblem


def test_a_graph_errors_later_line_with_the_os_error_is_the_one_line():
    message = (
        "Graph execution error:\n\nDetected at node 'save/SaveV2' defined at (most recent call last):\n"
        '  File "train.py", line 3\n\n'
        "/ckpt/model.ckpt-10_temp/part-00000-of-00001.data-00000-of-00001.tempstate1; No space left on device\n"
        "\t [[{{node save/SaveV2}}]]"
    )
    line = environment_errors.describe(tf.errors.ResourceExhaustedError(None, None, message))
    assert line == (
        "the disk is full: /ckpt/model.ckpt-10_temp/part-00000-of-00001.data-00000-of-00001.tempstate1; "
        "No space left on device"
    )


def test_a_first_line_that_says_something_is_kept_before_the_os_error():
    message = "Failed to write the events file.\nwrite /logs/events: No space left on device"
    line = environment_errors.describe(tf.errors.UnknownError(None, None, message))
    assert line == "the disk is full: Failed to write the events file: write /logs/events: No space left on device"


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_save_onto_a_full_disk_is_one_line_with_the_cause_and_the_folder(tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)], check=True, timeout=20)
    try:
        with tf.Graph().as_default():
            tf.compat.v1.Variable(tf.zeros([256, 1024]), name="w")  # 1 MiB: more than the disk holds
            saver = tf.compat.v1.train.Saver()
            with tf.compat.v1.Session() as session:
                session.run(tf.compat.v1.global_variables_initializer())
                with (
                    pytest.raises(EnvironmentProblem) as problem,
                    environment_errors.reported(f"saving into {full}"),
                ):
                    saver.save(session, str(full / "model.ckpt"))
    finally:
        subprocess.run(["umount", str(full)], check=False, timeout=20)
    line = str(problem.value)
    assert "\n" not in line, line
    assert line.startswith(f"saving into {full}: the disk is full: "), line
    assert "No space left on device" in line, line
