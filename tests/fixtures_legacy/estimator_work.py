"""A TF 1.x estimator job in the shapes that train nothing: run under scripts/run_legacy.py.

    run_legacy.py estimator_work.py --mode=train  --model_dir=D   # trains 5 steps (no cluster)
    run_legacy.py estimator_work.py --mode=serve  --model_dir=D --export_dir=E  # restores, exports, predicts
    run_legacy.py estimator_work.py --mode=train_here --model_dir=D             # Estimator.train() in any role

In serve mode only the chief (or the task alone) works; every other task ends at once, as a serving
run of TFRA's estimator demo does.
"""

import argparse
import json
import os

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--mode", required=True, choices=("train", "serve", "train_here"))
parser.add_argument("--model_dir", required=True)
parser.add_argument("--export_dir")
args, _ = parser.parse_known_args()


def input_fn():
    x = np.arange(16, dtype=np.float32).reshape(16, 1)
    return tf.data.Dataset.from_tensor_slices(({"x": x}, 2 * x)).repeat().batch(4)


def predict_input_fn():
    return tf.data.Dataset.from_tensor_slices({"x": np.ones((6, 1), np.float32)}).batch(3)


def serving_input_fn():
    x = tf.placeholder(tf.float32, [None, 1], name="x")
    return tf.estimator.export.ServingInputReceiver({"x": x}, {"x": x})


columns = [tf.feature_column.numeric_column("x")]
task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
serving_task = task.get("type") in (None, "chief", "master")
if args.mode == "train":
    estimator = tf.estimator.LinearRegressor(columns, model_dir=args.model_dir)
    estimator.train(input_fn, steps=5)
elif args.mode == "serve" and serving_task:
    # No cluster in the RunConfig: a serving job reads the model dir alone.
    os.environ.pop("TF_CONFIG", None)
    estimator = tf.estimator.LinearRegressor(columns, model_dir=args.model_dir)
    exported = estimator.export_saved_model(args.export_dir, serving_input_fn)
    predictions = list(estimator.predict(predict_input_fn))
    print(f"exported {exported.decode()}; {len(predictions)} predictions", flush=True)
elif args.mode == "train_here":
    estimator = tf.estimator.LinearRegressor(columns, model_dir=args.model_dir)
    estimator.train(input_fn, steps=5)
