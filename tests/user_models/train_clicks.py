"""Every task of a cluster runs this script: ps_toolkit.train takes its role from TF_CONFIG.

python train_clicks.py CHECKPOINT_DIR [ignored launcher flags...]
"""

import os
import sys

# tf.compat.v1.layers needs the legacy Keras, chosen before TensorFlow is imported.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import clicks  # noqa: E402

import ps_toolkit  # noqa: E402

config = ps_toolkit.TrainConfig(
    train_steps=200, batch_size=64, optimizer="adagrad", steps_per_run=20, checkpoint_dir=sys.argv[1]
)
ps_toolkit.train(clicks.model_fn, clicks.input_fn, config=config, eval_input_fn=clicks.eval_input_fn)
