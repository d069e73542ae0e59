"""ps_toolkit.base.tf_import: a task's TensorFlow import skips the eager Keras 3 load."""

import os
import subprocess
import sys

from ps_toolkit.base import tf_import

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = (
    "import sys; from ps_toolkit.base import tf_import; tf_import.prefer_lean_import(); import tensorflow as tf; "
    "print('keras.src.optimizers' in sys.modules, type(tf.compat.v1.layers.Dense(1)).__module__.split('.')[0])"
)


def test_the_user_choice_wins():
    environ = {tf_import.LEGACY_KERAS_ENV: "0"}
    tf_import.prefer_lean_import(environ)
    assert environ == {tf_import.LEGACY_KERAS_ENV: "0"}
    environ = {}
    tf_import.prefer_lean_import(environ)
    assert environ == {tf_import.LEGACY_KERAS_ENV: "1"}


def test_tensorflow_imports_without_keras_3_and_keeps_tf1_layers():
    env = {k: v for k, v in os.environ.items() if k != tf_import.LEGACY_KERAS_ENV}
    env["PYTHONPATH"] = REPO
    probe = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr[-2000:]
    keras_3_loaded, layers_package = probe.stdout.split()
    assert keras_3_loaded == "False", probe.stdout
    assert layers_package == "tf_keras", probe.stdout
