"""MNIST with a custom tf.estimator and train_and_evaluate, TF 1.x style: seed 003's four TF_CONFIG roles.

    python scripts/launch_local.py --chief --num_workers=1 --num_ps=1 --evaluator --grace_secs=30 --ps_grace_secs=30 \
        -- python scripts/run_legacy.py examples/mnist_train_and_evaluate/mnist_train_and_evaluate.py \
        --model_dir=/tmp/mnist_tae

or one terminal per task, each with its own TF_CONFIG (seed 003's commands; the evaluator is not part of the
training cluster):

    TF_CONFIG='{"cluster": {"chief": ["localhost:2000"], "worker": ["localhost:2001"], "ps": ["localhost:2002"]},
      "task": {"type": "ps", "index": 0}}' \
      python scripts/run_legacy.py examples/mnist_train_and_evaluate/mnist_train_and_evaluate.py \
      --model_dir=/tmp/mnist_tae
    # then "chief", "worker" and "evaluator" as the task type

and without TF_CONFIG it trains and evaluates in one process (seed 003's "local training").

A 784-128-10 network from tf.layers in a model_fn, Adam, accuracy as its
evaluation metric; the chief writes checkpoints and summaries to --model_dir,
the evaluator evaluates each new checkpoint on the test digits and writes
<model_dir>/eval, until the one at --max_steps. Each task, ps included, ends by
itself with status 0 (the compat layer's start and end, compat/estimator_roles.py).
"""

import argparse
import os
import sys

import tensorflow as tf
from tensorflow.examples.tutorials.mnist import input_data

EMBEDDED_DIGITS = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "ps_toolkit", "models", "embedded_digits"
)
FLAGS = None


def model_fn(features, labels, mode, params):
    hidden = tf.layers.dense(features["image"], params["hidden_units"], activation=tf.nn.relu, name="hidden")
    logits = tf.layers.dense(hidden, 10, name="logits")
    classes = tf.argmax(logits, axis=1)
    if mode == tf.estimator.ModeKeys.PREDICT:
        predictions = {"class": classes, "probabilities": tf.nn.softmax(logits)}
        return tf.estimator.EstimatorSpec(mode, predictions=predictions)
    loss = tf.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
    if mode == tf.estimator.ModeKeys.EVAL:
        metrics = {"accuracy": tf.metrics.accuracy(labels=labels, predictions=classes)}
        return tf.estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops=metrics)
    optimizer = tf.train.AdamOptimizer(params["learning_rate"])
    train_op = optimizer.minimize(loss, global_step=tf.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


def input_fn(images, labels, batch_size, train):
    def fn():
        dataset = tf.data.Dataset.from_tensor_slices(({"image": images}, labels.astype("int32")))
        if train:
            dataset = dataset.shuffle(len(images)).repeat()
        return dataset.batch(batch_size)

    return fn


def main(_):
    mnist = input_data.read_data_sets(FLAGS.data_dir, validation_size=0)
    run_config = tf.estimator.RunConfig(
        model_dir=FLAGS.model_dir,
        save_checkpoints_steps=FLAGS.save_checkpoints_steps,
        save_summary_steps=100,
    )
    estimator = tf.estimator.Estimator(
        model_fn=model_fn, config=run_config, params={"hidden_units": 128, "learning_rate": FLAGS.learning_rate}
    )
    train_spec = tf.estimator.TrainSpec(
        input_fn=input_fn(mnist.train.images, mnist.train.labels, FLAGS.batch_size, train=True),
        max_steps=FLAGS.max_steps,
    )
    eval_spec = tf.estimator.EvalSpec(
        input_fn=input_fn(mnist.test.images, mnist.test.labels, 100, train=False),
        steps=None,
        throttle_secs=FLAGS.throttle_secs,
    )
    result = tf.estimator.train_and_evaluate(estimator, train_spec, eval_spec)
    if result is not None:  # local training returns (metrics, export results); distributed roles return None
        metrics = result[0]
        print(f"test accuracy {metrics['accuracy']:.4f} at step {metrics['global_step']}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--model_dir", default="/tmp/mnist_train_and_evaluate", help="shared by every task")
    parser.add_argument("--data_dir", default=EMBEDDED_DIGITS, help="folder with the four MNIST IDX gzip files")
    parser.add_argument("--max_steps", type=int, default=1000)
    parser.add_argument("--batch_size", type=int, default=100)
    parser.add_argument("--learning_rate", type=float, default=0.001)
    parser.add_argument("--save_checkpoints_steps", type=int, default=200)
    parser.add_argument("--throttle_secs", type=int, default=5)
    FLAGS, unparsed = parser.parse_known_args()
    tf.app.run(main=main, argv=[sys.argv[0]] + unparsed)
