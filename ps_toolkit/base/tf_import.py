"""How a task imports TensorFlow: without the eager Keras 3 load it does not need.

TensorFlow 2.21's ``import tensorflow`` eagerly imports Keras 3's optimizers
(and, through Keras 3, scikit-learn and SciPy when they are installed): about
a third of the import's time, paid by every task of a cluster.
``TF_USE_LEGACY_KERAS=1``, TensorFlow's own switch, loads the legacy Keras
(tf_keras) instead, which is what ``tf.compat.v1`` graph code such as
``tf.compat.v1.layers`` needs anyway. ``tf.keras`` stays available.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

LEGACY_KERAS_ENV = "TF_USE_LEGACY_KERAS"


def prefer_lean_import(environ: MutableMapping[str, str] = os.environ) -> None:
    """Selects the legacy Keras for this process's TensorFlow import, unless the user chose already.

    Call before TensorFlow is first imported; afterwards it changes nothing.
    """
    environ.setdefault(LEGACY_KERAS_ENV, "1")
