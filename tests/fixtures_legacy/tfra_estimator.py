"""A TFRA estimator script as its users wrote them: train_and_evaluate over TF_CONFIG, then export, unchanged.

    python scripts/launch_local.py --chief --num_workers=1 --num_ps=2 --evaluator --grace_secs=30 \
        --ps_grace_secs=30 -- python scripts/run_legacy.py tests/fixtures_legacy/tfra_estimator.py \
        --model_dir=/tmp/tfra_est
    TF_CONFIG='{"cluster": {...}, "task": {"type": "chief", "index": 0}}' python scripts/run_legacy.py \
        tests/fixtures_legacy/tfra_estimator.py --model_dir=/tmp/tfra_est --mode=serving --export_dir=/tmp/tfra_exp

In the style of TFRA's movielens-100k-estimator demo, with synthetic ratings:
user and movie ids (int64, Zipf-like) looked up in two dynamic embedding tables
sharded over the ps tasks (``tf.unique`` then ``embedding_lookup`` with
``return_trainable=True``, then ``tf.gather``), three Dense layers, Adam through
``DynamicEmbeddingOptimizer``. ``--mode=train`` runs train_and_evaluate on every
TF_CONFIG role; ``--mode=serving`` (the chief) turns on inference mode and
exports a SavedModel whose tables live on the local device, one shard per ps as
in training. The launcher appends its cluster flags (--ps_hosts...) to every
task's command; absl refuses undeclared flags, so this script declares them, and
reads TF_CONFIG as the demo does.
"""

import json
import os

import numpy as np
import tensorflow as tf
import tensorflow_recommenders_addons as tfra
from absl import app, flags
from tensorflow.keras.layers import Dense

flags.DEFINE_string("model_dir", "./ckpt", "model_dir")
flags.DEFINE_string("export_dir", "./export_dir", "export_dir")
flags.DEFINE_string("mode", "train", "train or serving")
flags.DEFINE_integer("max_steps", 300, "global steps to train")
for _name in ("ps_hosts", "worker_hosts", "chief_hosts", "evaluator_hosts", "job_name"):
    flags.DEFINE_string(_name, None, "set by launch_local.py; this script reads TF_CONFIG")
flags.DEFINE_integer("task_index", None, "set by launch_local.py; this script reads TF_CONFIG")
FLAGS = flags.FLAGS

EMBEDDING_SIZE = 16


def synthetic_ratings(n, seed):
    """Ratings that depend on the user (id % 4) and the movie (id % 3): learnable from the rows alone."""
    rng = np.random.RandomState(seed)
    users = np.exp(rng.uniform(0, np.log(2000), n)).astype(np.int64)
    movies = np.exp(rng.uniform(0, np.log(1000), n)).astype(np.int64)
    ratings = (users % 4 + movies % 3).astype(np.float32)
    return {"movie_id": movies, "user_id": users, "user_rating": ratings}


def input_fn():
    dataset = tf.data.Dataset.from_tensor_slices(synthetic_ratings(20000, 2021))
    return dataset.shuffle(20000, seed=2021).repeat().batch(128)


def eval_input_fn():
    return tf.data.Dataset.from_tensor_slices(synthetic_ratings(1000, 7)).batch(250)


def model_fn(features, labels, mode, params):
    movie_id = features["movie_id"]
    user_id = features["user_id"]
    rating = features["user_rating"]

    if mode == tf.estimator.ModeKeys.TRAIN:
        ps_list = [f"/job:ps/replica:0/task:{i}/CPU:0" for i in range(params["ps_num"])]
        initializer = tf.keras.initializers.RandomNormal(-1, 1)
    else:
        ps_list = ["/job:localhost/replica:0/task:0/CPU:0"] * params["ps_num"]
        initializer = tf.keras.initializers.Zeros()

    user_embeddings = tfra.dynamic_embedding.get_variable(
        name="user_dynamic_embeddings", dim=EMBEDDING_SIZE, devices=ps_list, initializer=initializer
    )
    movie_embeddings = tfra.dynamic_embedding.get_variable(
        name="movie_dynamic_embeddings", dim=EMBEDDING_SIZE, devices=ps_list, initializer=initializer
    )

    user_id_val, user_id_idx = tf.unique(tf.concat(user_id, axis=0))
    user_id_weights, _ = tfra.dynamic_embedding.embedding_lookup(
        params=user_embeddings, ids=user_id_val, name="user-id-weights", return_trainable=True
    )
    user_id_weights = tf.gather(user_id_weights, user_id_idx)

    movie_id_val, movie_id_idx = tf.unique(tf.concat(movie_id, axis=0))
    movie_id_weights, _ = tfra.dynamic_embedding.embedding_lookup(
        params=movie_embeddings, ids=movie_id_val, name="movie-id-weights", return_trainable=True
    )
    movie_id_weights = tf.gather(movie_id_weights, movie_id_idx)

    embeddings = tf.concat([user_id_weights, movie_id_weights], axis=1)
    dnn = Dense(32, activation="relu")(embeddings)
    dnn = Dense(16, activation="relu")(dnn)
    out = tf.reshape(Dense(1)(dnn), shape=[-1])
    loss = tf.keras.losses.MeanSquaredError()(rating, out)

    if mode == tf.estimator.ModeKeys.EVAL:
        eval_metric_ops = {"rmse": tf.compat.v1.metrics.root_mean_squared_error(rating, out)}
        return tf.estimator.EstimatorSpec(mode=mode, loss=loss, eval_metric_ops=eval_metric_ops)

    if mode == tf.estimator.ModeKeys.TRAIN:
        optimizer = tf.compat.v1.train.AdamOptimizer(learning_rate=0.01)
        optimizer = tfra.dynamic_embedding.DynamicEmbeddingOptimizer(optimizer)
        train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_or_create_global_step())
        return tf.estimator.EstimatorSpec(mode=mode, predictions={"out": out}, loss=loss, train_op=train_op)

    predictions_for_net = {"out": out}
    export_outputs = {"predict_export_outputs": tf.estimator.export.PredictOutput(outputs=predictions_for_net)}
    return tf.estimator.EstimatorSpec(mode, predictions=predictions_for_net, export_outputs=export_outputs)


def run_config():
    return tf.estimator.RunConfig(
        log_step_count_steps=100, save_summary_steps=100, save_checkpoints_steps=100, save_checkpoints_secs=None
    )


def train(model_dir, ps_num):
    estimator = tf.estimator.Estimator(
        model_fn=model_fn, model_dir=model_dir, params={"ps_num": ps_num}, config=run_config()
    )
    train_spec = tf.estimator.TrainSpec(input_fn=input_fn, max_steps=FLAGS.max_steps)
    eval_spec = tf.estimator.EvalSpec(input_fn=eval_input_fn, steps=None, throttle_secs=1)
    tf.estimator.train_and_evaluate(estimator, train_spec, eval_spec)


def serving_input_receiver_dense_fn():
    input_spec = {
        "movie_id": tf.constant([1], tf.int64),
        "user_id": tf.constant([1], tf.int64),
        "user_rating": tf.constant([1.0], tf.float32),
    }
    return tf.estimator.export.build_raw_serving_input_receiver_fn(input_spec)


def export_for_serving(model_dir, export_dir, ps_num):
    estimator = tf.estimator.Estimator(
        model_fn=model_fn, model_dir=model_dir, params={"ps_num": ps_num}, config=run_config()
    )
    return estimator.export_saved_model(export_dir, serving_input_receiver_dense_fn())


def main(argv):
    del argv
    tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    task_name = tf_config.get("task", {}).get("type")
    task_idx = tf_config.get("task", {}).get("index")
    ps_num = len(tf_config["cluster"]["ps"])

    if FLAGS.mode == "train":
        train(FLAGS.model_dir, ps_num)
        print(json.dumps({"tfra_result": task_name, "index": task_idx, "trained": True}), flush=True)
    if FLAGS.mode == "serving" and task_name == "chief" and int(task_idx) == 0:
        tfra.dynamic_embedding.enable_inference_mode()
        exported = export_for_serving(FLAGS.model_dir, FLAGS.export_dir, ps_num)
        print(json.dumps({"tfra_result": "export", "path": exported.decode()}), flush=True)


if __name__ == "__main__":
    app.run(main)
