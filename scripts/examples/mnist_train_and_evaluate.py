"""The train_and_evaluate MNIST example on ps_toolkit.estimator: TF_CONFIG roles chief, worker, ps, evaluator.

    python scripts/launch_local.py --chief --num_workers=1 --num_ps=1 --evaluator --grace_secs=30 --ps_grace_secs=10 \
        -- python scripts/examples/mnist_train_and_evaluate.py --model_dir=/tmp/mnist_tae

or one terminal per task, each with its own TF_CONFIG (seed 003's commands):

    TF_CONFIG='{"cluster": {"chief": ["localhost:2000"], "worker": ["localhost:2001"], "ps": ["localhost:2002"],
      "evaluator": ["localhost:2003"]}, "task": {"type": "ps", "index": 0}}' \
      python scripts/examples/mnist_train_and_evaluate.py --model_dir=/tmp/mnist_tae    # then chief, worker, evaluator

The chief writes checkpoints and summaries to --model_dir; the evaluator
evaluates each new checkpoint and writes eval summaries to <model_dir>/eval
until the one at --max_steps; the ps exits once every replica is done.
"""

import os
import sys

from absl import app, flags

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from ps_toolkit.estimator import EvalSpec, RunConfig, TrainSpec, train_and_evaluate  # noqa: E402

from ps_toolkit import cli  # noqa: E402

_MODEL_DIR = flags.DEFINE_string("model_dir", None, "Shared model directory: checkpoints, summaries, eval/.")
_MAX_STEPS = flags.DEFINE_integer("max_steps", 1000, "Global steps to train for.")
_MODEL = flags.DEFINE_string("model", "softmax", "softmax, mlp, wide or cnn.")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "Folder with the MNIST IDX files; default the embedded digits.")
_CHECKPOINT_STEPS = flags.DEFINE_integer("save_checkpoints_steps", 200, "RunConfig save_checkpoints_steps.")
_SUMMARY_STEPS = flags.DEFINE_integer("save_summary_steps", 100, "RunConfig save_summary_steps.")
_EVAL_STEPS = flags.DEFINE_integer("eval_steps", None, "EvalSpec steps: test batches per evaluation (default all).")
_THROTTLE = flags.DEFINE_float("throttle_secs", 2.0, "EvalSpec throttle_secs: at most one evaluation this often.")


def main(argv):
    del argv  # the launcher's --ps_hosts/--job_name/... agree with TF_CONFIG, which is what is read
    if not _MODEL_DIR.value:
        cli.fail("--model_dir is required: the folder every task shares")
    run_config = RunConfig(
        model_dir=_MODEL_DIR.value,
        save_checkpoints_steps=_CHECKPOINT_STEPS.value,
        save_summary_steps=_SUMMARY_STEPS.value,
    )
    train_spec = TrainSpec(max_steps=_MAX_STEPS.value, model=_MODEL.value, data_dir=_DATA_DIR.value)
    eval_spec = EvalSpec(steps=_EVAL_STEPS.value, throttle_secs=_THROTTLE.value)
    with cli.user_errors():
        train_and_evaluate(run_config, train_spec, eval_spec)


def _parse(argv):
    # Cluster flags a launcher appends are not ours: TF_CONFIG carries the cluster.
    try:
        return flags.FLAGS(argv, known_only=True)
    except flags.Error as err:
        cli.fail(str(err))


if __name__ == "__main__":
    app.run(main, flags_parser=_parse)
