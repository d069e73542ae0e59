"""Estimator code of each era, run under run_legacy.py; prints one JSON line: form -> null (worked) or the error.

Forms: TF 1.x ``import tensorflow as tf`` (canned Linear/DNN/DNNLinearCombined
classifiers and regressors, a custom Estimator exported with
export_saved_model and export_savedmodel, loaded back and asked),
``import tensorflow.compat.v1 as tf`` + ``tf.estimator``,
``tf.compat.v1.estimator``, and TF 2.x's canned estimators with a Keras
optimizer (``tf.compat.v2.estimator``).
"""

import json
import os
import sys
import tempfile

import numpy as np
import tensorflow as tf
import tensorflow.compat.v1 as tf_compat_v1

STEPS = 20


def data(n=256, seed=0):
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, 2, size=n)
    x = (rng.normal(size=n) + labels * 2.0 - 1.0).astype(np.float32)
    return {"x": x, "word": np.array(["ab"[label] for label in labels])}, labels.astype(np.int32)


def input_fn(module):
    def fn():
        features, labels = data()
        return module.data.Dataset.from_tensor_slices((features, labels)).repeat().batch(32)

    return fn


def columns(module):
    fc = module.feature_column
    word = fc.categorical_column_with_vocabulary_list("word", ["a", "b"])
    return [fc.numeric_column("x")], [word], [fc.numeric_column("x"), fc.indicator_column(word)]


def fit(estimator, module, regression=False):
    estimator.train(input_fn(module), steps=STEPS)
    metrics = estimator.evaluate(input_fn(module), steps=2)
    assert metrics["global_step"] == STEPS, metrics
    if not regression:
        assert "accuracy" in metrics, metrics
    return metrics


def tf1_canned(tmp):
    linear, sparse, deep = columns(tf)
    fit(tf.estimator.LinearClassifier(linear + sparse, model_dir=f"{tmp}/lc"), tf)
    fit(tf.estimator.LinearRegressor(linear, model_dir=f"{tmp}/lr"), tf, regression=True)
    fit(tf.estimator.DNNClassifier([4], deep, model_dir=f"{tmp}/dc"), tf)
    fit(tf.estimator.DNNRegressor([4], deep, model_dir=f"{tmp}/dr"), tf, regression=True)
    combined = {"dnn_feature_columns": deep, "dnn_hidden_units": [4]}
    fit(tf.estimator.DNNLinearCombinedClassifier(f"{tmp}/dlc", linear + sparse, **combined), tf)
    fit(tf.estimator.DNNLinearCombinedRegressor(f"{tmp}/dlr", linear, **combined), tf, regression=True)


def model_fn(features, labels, mode):
    logits = tf.layers.dense(tf.expand_dims(features["x"], 1), 2)
    predictions = {"class": tf.argmax(logits, 1)}
    if mode == tf.estimator.ModeKeys.PREDICT:
        outputs = {"serving_default": tf.estimator.export.PredictOutput(predictions)}
        return tf.estimator.EstimatorSpec(mode, predictions=predictions, export_outputs=outputs)
    loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
    train_op = tf.train.AdamOptimizer(0.1).minimize(loss, global_step=tf.train.get_global_step())
    metrics = {"accuracy": tf.metrics.accuracy(labels, predictions["class"])}
    hooks = [tf.train.LoggingTensorHook({"loss": loss}, every_n_iter=10)]
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op, eval_metric_ops=metrics, training_hooks=hooks)


def serving_input_receiver_fn():
    x = tf.placeholder(tf.float32, [None], name="x")
    return tf.estimator.export.ServingInputReceiver({"x": x}, {"x": x})


def answer(export_dir):
    """The exported model's classes for x = -3 and 3, through tf.compat.v1.saved_model.loader."""
    graph = tf.Graph()
    with graph.as_default(), tf.Session(graph=graph) as session:
        meta = tf.saved_model.loader.load(session, [tf.saved_model.tag_constants.SERVING], export_dir)
        signature = meta.signature_def["serving_default"]
        feed = {signature.inputs["x"].name: [-3.0, 3.0]}
        return session.run(signature.outputs["class"].name, feed).tolist()


def tf1_custom_and_export(tmp):
    estimator = tf.estimator.Estimator(model_fn, model_dir=f"{tmp}/custom")
    fit(estimator, tf)
    estimator.train(input_fn(tf), steps=200)
    first = estimator.export_saved_model(f"{tmp}/export", serving_input_receiver_fn)
    second = estimator.export_savedmodel(f"{tmp}/export_old", serving_input_receiver_fn)
    answers = [answer(path.decode()) for path in (first, second)]
    assert answers == [[0, 1], [0, 1]], answers


def compat_v1_module(tmp):
    assert tf_compat_v1.estimator is tf.estimator
    _, _, deep = columns(tf_compat_v1)
    fit(tf_compat_v1.estimator.DNNClassifier([4], deep, model_dir=f"{tmp}/v1m"), tf_compat_v1)


def compat_v1_attribute(tmp):
    linear, _, _ = columns(tf)
    fit(tf.compat.v1.estimator.LinearClassifier(linear, model_dir=f"{tmp}/v1a"), tf)


def v2_canned_keras_optimizer(tmp):
    v2 = tf.compat.v2
    _, _, deep = columns(v2)
    estimator = v2.estimator.DNNClassifier(
        [4], deep, model_dir=f"{tmp}/v2", optimizer=v2.keras.optimizers.legacy.Adam(learning_rate=0.05)
    )
    assert type(estimator).__name__ == "DNNClassifierV2", type(estimator)
    fit(estimator, tf)
    linear = v2.estimator.LinearRegressor(columns(v2)[0], model_dir=f"{tmp}/v2l", optimizer="Ftrl")
    fit(linear, tf, regression=True)


FORMS = [tf1_canned, tf1_custom_and_export, compat_v1_module, compat_v1_attribute, v2_canned_keras_optimizer]


def main():
    report = {}
    with tempfile.TemporaryDirectory(prefix="estimator_forms_") as tmp:
        for form in FORMS:
            try:
                form(os.path.join(tmp, form.__name__))
                report[form.__name__] = None
            except Exception as err:  # noqa: BLE001 -- the report says which form failed and how
                report[form.__name__] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    print(json.dumps(report), flush=True)
    sys.exit(0 if not any(report.values()) else 1)


if __name__ == "__main__":
    main()
