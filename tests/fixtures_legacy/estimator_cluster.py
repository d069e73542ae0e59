"""A TF 1.x estimator script as its authors wrote them: train_and_evaluate on every TF_CONFIG role.

    --model=dnn     a canned DNNClassifier over feature columns
    --model=custom  a custom model_fn with SyncReplicasOptimizer and its hook, exported after training
    --compat_v1     ``import tensorflow.compat.v1 as tf`` instead of ``import tensorflow as tf``

The data are two labelled Gaussian blobs in 4 dimensions, made here from a
fixed seed. The chief exports (custom model) after train_and_evaluate and
prints one JSON line with the export folder.
"""

import argparse
import json
import sys

import numpy as np

if "--compat_v1" in sys.argv:  # the TF 2.0-2.15 era's spelling: TensorFlow's own SyncReplicasOptimizer class
    import tensorflow.compat.v1 as tf
else:
    import tensorflow as tf

FEATURES = ["a", "b", "c", "d"]


def make_data(n, seed):
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, 2, size=n)
    points = rng.normal(size=(n, 4)).astype(np.float32) + (labels[:, None] * 2.0 - 1.0)
    return {name: points[:, i] for i, name in enumerate(FEATURES)}, labels.astype(np.int32)


def input_fn(n, seed, repeat):
    def fn():
        features, labels = make_data(n, seed)
        dataset = tf.data.Dataset.from_tensor_slices((features, labels))
        if repeat:
            dataset = dataset.shuffle(n).repeat()
        return dataset.batch(32)

    return fn


def custom_model_fn(features, labels, mode, params, config):
    columns = [tf.feature_column.numeric_column(name) for name in FEATURES]
    inputs = tf.feature_column.input_layer(features, columns)
    hidden = tf.layers.dense(inputs, 8, activation=tf.nn.relu)
    logits = tf.layers.dense(hidden, 2)
    classes = tf.argmax(logits, axis=1)
    if mode == tf.estimator.ModeKeys.PREDICT:
        predictions = {"class": classes, "probabilities": tf.nn.softmax(logits)}
        return tf.estimator.EstimatorSpec(
            mode,
            predictions=predictions,
            export_outputs={"predict": tf.estimator.export.PredictOutput(predictions)},
        )
    loss = tf.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
    if mode == tf.estimator.ModeKeys.EVAL:
        accuracy = tf.metrics.accuracy(labels=labels, predictions=classes)
        return tf.estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops={"accuracy": accuracy})
    optimizer = tf.train.SyncReplicasOptimizer(
        tf.train.GradientDescentOptimizer(0.1),
        replicas_to_aggregate=config.num_worker_replicas,
        total_num_replicas=config.num_worker_replicas,
    )
    train_op = optimizer.minimize(loss, global_step=tf.train.get_global_step())
    hook = optimizer.make_session_run_hook(config.is_chief)
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op, training_hooks=[hook])


def serving_input_receiver_fn():
    receivers = {name: tf.placeholder(tf.float32, [None], name=name) for name in FEATURES}
    return tf.estimator.export.ServingInputReceiver(receivers, receivers)


def main(args):
    config = tf.estimator.RunConfig(
        model_dir=args.model_dir, save_checkpoints_steps=args.checkpoint_steps, save_summary_steps=50
    )
    if args.model == "dnn":
        columns = [tf.feature_column.numeric_column(name) for name in FEATURES]
        estimator = tf.estimator.DNNClassifier(hidden_units=[8], feature_columns=columns, config=config)
    else:
        estimator = tf.estimator.Estimator(model_fn=custom_model_fn, config=config)
    train_spec = tf.estimator.TrainSpec(input_fn=input_fn(2000, 1, True), max_steps=args.max_steps)
    eval_spec = tf.estimator.EvalSpec(input_fn=input_fn(400, 2, False), steps=None, throttle_secs=1)
    tf.estimator.train_and_evaluate(estimator, train_spec, eval_spec)
    if args.model == "custom" and config.is_chief:
        exported = estimator.export_saved_model(args.model_dir + "/export", serving_input_receiver_fn)
        print(json.dumps({"task": config.task_type, "export": exported.decode()}), flush=True)
    else:
        print(json.dumps({"task": config.task_type, "done": True}), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=["dnn", "custom"], default="dnn")
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--max_steps", type=int, default=300)
    parser.add_argument("--checkpoint_steps", type=int, default=100)
    parser.add_argument("--compat_v1", action="store_true")
    args, _ = parser.parse_known_args()  # a launcher's cluster flags are not this script's: TF_CONFIG is
    main(args)
    sys.exit(0)
