"""The trainer's entry point, as Cloud ML samples wrote it: strict argparse, a relative import, TF_CONFIG."""

import argparse
import importlib.util
import json
import os

import tensorflow as tf

from . import model

parser = argparse.ArgumentParser()
parser.add_argument("--job-dir", required=True)
args = parser.parse_args()
task = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task")
w = model.build()
with tf.Session() as session:
    session.run(tf.global_variables_initializer())
    print(f"job_dir={args.job_dir} w={session.run(w)} task={task} spec={importlib.util.find_spec('tensorflow').name}")
