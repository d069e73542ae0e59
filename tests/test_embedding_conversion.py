"""Fixed tables to dynamic tables (dynamic_embedding.conversion): a ctr model keeps its predictions.

A ctr-shaped model on fixed partitioned tables (benchmarks/ctr_model.py, a few fields, a few rows),
trained a few steps, is converted; the same model on dynamic tables restores the converted
checkpoint and predicts what the fixed model predicted at its last step, and its next step (its
optimizer's slots converted too) predicts what the fixed model's next step does. The toolkit
accepts the checkpoint and continues training as it continues the fixed model. The mappings, bad
input and the command: tests/test_embedding_conversion_inputs.py.
"""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from benchmarks import ctr_model
from ps_toolkit import dynamic_embedding as de
from ps_toolkit.dynamic_embedding import conversion, id_mappings, row_rules
from ps_toolkit.dynamic_embedding.fixed_tables import OPTIMIZER_SLOTS
from ps_toolkit.task import checkpoints, table_checkpoints
from ps_toolkit.training.model_calls import MODEL_SCOPE

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


FIELDS, VOCAB, DIM, BATCH = 3, 20, 4, 16


PARAMS = {"vocab": VOCAB, "dim": DIM, "num_shards": 2}


OPTIMIZERS = {
    "adagrad": lambda: tf.compat.v1.train.AdagradOptimizer(0.1),
    "adam": lambda: tf.compat.v1.train.AdamOptimizer(0.01),
    "ftrl": lambda: tf.compat.v1.train.FtrlOptimizer(0.1),
    "rmsprop": lambda: tf.compat.v1.train.RMSPropOptimizer(0.01),
    "momentum": lambda: tf.compat.v1.train.MomentumOptimizer(0.05, momentum=0.9),
}


def batch(seed):
    rng = np.random.default_rng(seed)
    features = {
        "ids": rng.integers(0, VOCAB, size=(BATCH, FIELDS), dtype=np.int64),
        "dense": rng.normal(size=(BATCH, 13)).astype(np.float32),
    }
    return features, rng.integers(0, 2, size=BATCH, dtype=np.int64)


class CtrGraph:
    """benchmarks/ctr_model's model_fn under the toolkit's model scope, fed by placeholders, with a training op."""

    def __init__(self, optimizer, dynamic):
        self.graph = tf.Graph()
        with self.graph.as_default():
            self.ids = tf.compat.v1.placeholder(tf.int64, [None, FIELDS])
            self.dense = tf.compat.v1.placeholder(tf.float32, [None, 13])
            self.labels = tf.compat.v1.placeholder(tf.int64, [None])
            features = {"ids": self.ids, "dense": self.dense}
            with tf.compat.v1.variable_scope(MODEL_SCOPE), de.batched_lookups():
                spec = ctr_model.model_fn(features, self.labels, "train", {**PARAMS, "dynamic": dynamic})
            with tf.compat.v1.variable_scope(MODEL_SCOPE, reuse=True), de.batched_lookups():
                predicted = ctr_model.model_fn(features, None, "infer", {**PARAMS, "dynamic": dynamic})
            self.probability = predicted.predictions["probability"]
            step = tf.compat.v1.train.get_or_create_global_step()
            wrapped = OPTIMIZERS[optimizer]()
            self.train_op = (de.TableOptimizer(wrapped) if dynamic else wrapped).minimize(spec.loss, step)
            self.saver = tf.compat.v1.train.Saver()
            self.init = tf.compat.v1.global_variables_initializer()
        self.session = tf.compat.v1.Session(graph=self.graph)

    def feed(self, seed):
        features, labels = batch(seed)
        return {self.ids: features["ids"], self.dense: features["dense"], self.labels: labels}

    def predict(self, seed=99):
        return self.session.run(self.probability, self.feed(seed))

    def save(self, prefix, step):
        with self.graph.as_default():
            return self.saver.save(self.session, prefix, global_step=step)

    def restore(self, prefix):
        with self.graph.as_default():
            self.saver.restore(self.session, prefix)


def train_fixed(tmp_path, optimizer, steps=6):
    """A fixed-table ctr model trained ``steps`` steps and saved: (its graph, its checkpoint folder)."""
    fixed = CtrGraph(optimizer, dynamic=False)
    fixed.session.run(fixed.init)
    for step in range(steps):
        fixed.session.run(fixed.train_op, fixed.feed(step))
    folder = str(tmp_path / "fixed")
    fixed.save(os.path.join(folder, "model.ckpt"), steps)
    return fixed, folder


@pytest.fixture(scope="module")
def adagrad_run(tmp_path_factory):
    fixed, folder = train_fixed(tmp_path_factory.mktemp("adagrad"), "adagrad")
    yield fixed, folder
    fixed.session.close()


def convert_ctr(folder, output, optimizer="auto"):
    table = conversion.TableConversion("model/embeddings_*", id_mappings.identity(), dim=DIM, key_dtype="int64")
    return conversion.convert(folder, output, [table], optimizer=optimizer)


def test_the_fixed_model_is_saved_in_partitions_the_converter_reads():
    # The fixture's premise: the fixed tables are partitioned (2 shards) and hold Adagrad slots.
    graph = CtrGraph("adagrad", dynamic=False)
    with graph.graph.as_default():
        names = {v.op.name for v in tf.compat.v1.global_variables()}
    graph.session.close()
    assert {"model/embeddings_0/part_0", "model/embeddings_0/part_1", "model/embeddings_0/part_0/Adagrad"} <= names


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_converted_ctr_model_predicts_as_the_fixed_one_at_its_last_step_and_steps_alike(tmp_path, optimizer):
    fixed, folder = train_fixed(tmp_path, optimizer)
    report = convert_ctr(folder, str(tmp_path / "dynamic"))
    assert report.optimizer == optimizer
    assert [t.dynamic for t in report.tables] == [f"model/embeddings_{f}" for f in range(FIELDS)]
    assert all(len(t.placement.ids) == VOCAB for t in report.tables)
    dynamic = CtrGraph(optimizer, dynamic=True)
    dynamic.restore(report.prefix)
    # The first step of the dynamic model sees the trained rows: the same predictions.
    np.testing.assert_allclose(dynamic.predict(), fixed.predict(), rtol=1e-6, atol=1e-7)
    assert dynamic.session.run(tf.compat.v1.train.get_global_step(dynamic.graph)) == 6
    # Its next step starts from the converted slots: both models step alike. Compared on the step's own batch:
    # the tables' updates are lazy, TF1 Adam's dense update also moves the rows a step did not touch.
    for graph in (fixed, dynamic):
        graph.session.run(graph.train_op, graph.feed(7))
    np.testing.assert_allclose(dynamic.predict(7), fixed.predict(7), rtol=1e-5, atol=1e-6)
    fixed.session.close()
    dynamic.session.close()


def test_the_toolkit_accepts_the_converted_checkpoint_for_the_dynamic_model(tmp_path, adagrad_run):
    _, folder = adagrad_run
    output = str(tmp_path / "dynamic")
    convert_ctr(folder, output)
    dynamic = CtrGraph("adagrad", dynamic=True)
    with dynamic.graph.as_default():
        step = checkpoints.check_model_matches_checkpoint(
            output,
            tf.compat.v1.global_variables(),
            de.tables_of_graph(),
            table_checkpoints.table_specs(),
        )
    dynamic.session.close()
    assert step == 6


def test_converted_rows_restore_onto_three_shards(tmp_path, adagrad_run):
    fixed, folder = adagrad_run
    report = convert_ctr(folder, str(tmp_path / "dynamic"))
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        with de.shard_devices(["/cpu:0"] * 3), tf.compat.v1.variable_scope(MODEL_SCOPE):
            table = de.get_table("embeddings_1", dim=DIM)
        rows = de.lookup(table, tf.range(VOCAB, dtype=tf.int64))
        tf.compat.v1.train.Saver().restore(session, report.prefix)
        restored = session.run(rows)
    with fixed.graph.as_default():
        (trained,) = [v for v in tf.compat.v1.global_variables() if v.op.name == "model/embeddings_1/part_0"]
        first = fixed.session.run(trained)
    np.testing.assert_array_equal(restored[: len(first)], first)


def test_the_slot_table_matches_tensorflow_and_the_row_rules():
    train = tf.compat.v1.train
    makers = {
        "sgd": lambda: train.GradientDescentOptimizer(0.1),
        "proximal_sgd": lambda: train.ProximalGradientDescentOptimizer(0.1),
        "momentum": lambda: train.MomentumOptimizer(0.1, 0.9),
        "adagrad": lambda: train.AdagradOptimizer(0.1),
        "proximal_adagrad": lambda: train.ProximalAdagradOptimizer(0.1),
        "adam": lambda: train.AdamOptimizer(0.1),
        "ftrl": lambda: train.FtrlOptimizer(0.1),
        "rmsprop": lambda: train.RMSPropOptimizer(0.1),
        "rmsprop_centered": lambda: train.RMSPropOptimizer(0.1, centered=True),
        "adadelta": lambda: train.AdadeltaOptimizer(0.1),
        "adagrad_da": lambda: train.AdagradDAOptimizer(0.1, train.get_or_create_global_step()),
    }
    assert set(makers) == set(OPTIMIZER_SLOTS)
    # TF1 calls Ftrl's accumulator "accum"; the row rules call it "accumulator". Every other slot keeps its name.
    renamed = {("ftrl", "accum"): "accumulator"}
    for name, make in makers.items():
        with tf.Graph().as_default():
            variable = tf.compat.v1.get_variable("t", [3, 2])
            optimizer = make()
            optimizer.minimize(tf.reduce_sum(tf.gather(variable, [0])))
            tf_slots = {
                optimizer.get_slot(variable, slot).op.name[len("t/") :]: renamed.get((name, slot), slot)
                for slot in optimizer.get_slot_names()
            }
            assert tf_slots == dict(OPTIMIZER_SLOTS[name]), name
            assert set(row_rules.rule_for(optimizer).slots) == set(tf_slots.values()), name


TRAIN = """
import json, sys
import ps_toolkit
from benchmarks import ctr_model
dynamic, checkpoint_dir, steps = sys.argv[1] == "dynamic", sys.argv[2], int(sys.argv[3])
config = ps_toolkit.TrainConfig(
    train_steps=steps, optimizer="adagrad", batch_size=32, checkpoint_dir=checkpoint_dir, save_checkpoint_steps=10
)
params = {"vocab": 20, "dim": 4, "num_shards": 2, "dynamic": dynamic}
result = ps_toolkit.train(ctr_model.model_fn, ctr_model.input_fn, config=config, params=params)
print("RESULT " + json.dumps(result))
"""


def toolkit_run(kind, checkpoint_dir, steps):
    """The toolkit's training of the ctr benchmark model (26 fields), alone in a process: its result record."""
    done = subprocess.run(
        [sys.executable, "-c", TRAIN, kind, str(checkpoint_dir), str(steps)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": REPO, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    return json.loads(line[len("RESULT ") :])


@pytest.mark.slow  # three trainings through ps_toolkit.train, each a fresh process
def test_the_toolkit_continues_a_converted_ctr_model_as_it_continues_the_fixed_one(tmp_path):
    fixed = tmp_path / "fixed"
    assert toolkit_run("fixed", fixed, 20)["global_step"] == 20
    shutil.copytree(fixed, tmp_path / "fixed_again")
    conversion.convert(
        str(fixed),
        str(tmp_path / "dynamic"),
        [conversion.TableConversion("model/embeddings_*", id_mappings.identity())],
    )
    # Both resume at step 20 and read the same batches (the input restarts): the same losses, step for step.
    continued = toolkit_run("fixed", tmp_path / "fixed_again", 30)
    converted = toolkit_run("dynamic", tmp_path / "dynamic", 30)
    assert converted["global_step"] == continued["global_step"] == 30
    assert converted["local_steps"] == 10
    assert converted["first_loss"] == pytest.approx(continued["first_loss"], rel=1e-5)
    assert converted["final_loss"] == pytest.approx(continued["final_loss"], rel=1e-4)
    assert converted["tables"]["model/embeddings_0"]["rows"] == 20
