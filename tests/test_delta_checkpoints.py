"""Delta checkpoints in one process: a whole checkpoint plus its newest delta restore the rows of a whole
checkpoint of the delta's step (after eviction, into another number of shards); plain readers see the whole
checkpoint; a delta whose base is gone is one warning and the whole checkpoint alone.

Graphs run in a plain tf.compat.v1.Session; several shards share the CPU.
"""

import logging
import os
import types

import numpy as np
import pytest
import tensorflow as tf

import ps_toolkit
from ps_toolkit import dynamic_embedding as de
from ps_toolkit.base.errors import ConfigError
from ps_toolkit.dynamic_embedding import delta_files
from ps_toolkit.dynamic_embedding.delta_checkpoints import DeltaCheckpointHook, DeltaMergingSaver
from ps_toolkit.task import checkpoints
from ps_toolkit.task.roles import evaluator
from ps_toolkit.training import export
from ps_toolkit.training.config import TrainConfig
from ps_toolkit.training.model_api import ModelDefinition

CPU = "/cpu:0"
COMPONENTS = ("rows", "meta", "slot_accumulator")


class _Model:
    """A table trained with Adagrad, evicting ids not seen for 3 steps, and the chief's savers of its graph."""

    def __init__(self, shards: int, key_dtype=tf.int64, admit_after: int = 1):
        self.graph = tf.Graph()
        self.key_dtype = key_dtype
        with self.graph.as_default():
            self.step = tf.compat.v1.train.get_or_create_global_step()
            with tf.compat.v1.variable_scope("model"):  # as the toolkit's model_fn calls make it: model/t
                self.table = de.get_table(
                    "t", 2, key_dtype=key_dtype, devices=[CPU] * shards, evict_after_steps=3, admit_after=admit_after
                )
            self.ids = tf.compat.v1.placeholder(key_dtype, [None])
            loss = tf.reduce_sum(tf.square(de.lookup(self.table, self.ids) - 1.0))
            optimizer = de.TableOptimizer(tf.compat.v1.train.AdagradOptimizer(0.1))
            self.train_op = optimizer.minimize(loss, global_step=self.step)
            self.evict_op = de.eviction.eviction_op(self.table, self.step)
            self.exports = {name: de.table_ops.export_component(self.table, name) for name in COMPONENTS}
            self.saver = DeltaMergingSaver(sharded=True)
            init = tf.compat.v1.global_variables_initializer()
        self.session = tf.compat.v1.Session(graph=self.graph)
        self.session.run(init)

    def train(self, batch):
        self.session.run(self.train_op, {self.ids: np.array(batch, dtype=self.key_dtype.as_numpy_dtype)})

    def save(self, prefix: str, step: int) -> str:
        os.makedirs(os.path.dirname(prefix), exist_ok=True)
        with self.graph.as_default():
            return self.saver.save(self.session, prefix, global_step=step)

    def restore(self, prefix: str) -> None:
        with self.graph.as_default():
            self.saver.restore(self.session, prefix)

    def content(self) -> dict:
        """Component -> {id: values} of the table, and the global step."""
        found = {"global_step": int(self.session.run(self.step))}
        for name, (ids, values) in self.session.run(self.exports).items():
            found[name] = {key: value.tolist() for key, value in zip(ids.tolist(), values, strict=True)}
        return found


def _with_hook(tmp_path, model: _Model, **hook_args):
    """(model, its checkpoint folder, the chief's DeltaCheckpointHook of it, the hook's base listener)."""
    checkpoint_dir = str(tmp_path / "ckpt")
    hook = DeltaCheckpointHook(model.saver, checkpoint_dir, **hook_args)
    with model.graph.as_default():
        hook.begin()
        listener = hook.base_listener()
    return model, checkpoint_dir, hook, listener


def _ids(values, key_dtype):
    return [str(v).encode() for v in values] if key_dtype == tf.string else values


def _train_save_and_delta(tmp_path, key_dtype=tf.int64, admit_after=1):
    """(base prefix, reference whole checkpoint of the delta's step, content at the delta) of one run."""
    model, checkpoint_dir, hook, listener = _with_hook(
        tmp_path, _Model(shards=2, key_dtype=key_dtype, admit_after=admit_after), every_steps=1
    )
    ids = lambda *values: _ids(values, key_dtype)  # noqa: E731
    model.train(ids(1, 2, 3, 400, 5000))  # step 0
    model.train(ids(1, 2, 6))  # step 1
    base = model.save(os.path.join(checkpoint_dir, "model.ckpt"), 2)
    listener.after_save(model.session, 2)
    model.train(ids(2, 7, 8))  # step 2: 2 changed, 7 and 8 new
    model.train(ids(9, 7))  # step 3
    model.session.run(model.evict_op)  # at step 4: every id last seen before step 1 goes (3, 400, 5000)
    model.train(ids(3, 9))  # step 4: 3 comes back as a new id; 1 and 6 (step 1) are kept from the base
    record = hook.write(model.session)
    assert record is not None and record["global_step"] == 5, record
    reference = model.save(str(tmp_path / "reference" / "model.ckpt"), 5)
    return base, reference, model.content()


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Key dtype -> (base prefix, reference whole checkpoint, content at the delta), made once per dtype."""
    made = {}

    def get(key_dtype):
        if key_dtype not in made:
            made[key_dtype] = _train_save_and_delta(tmp_path_factory.mktemp(key_dtype.name), key_dtype)
        return made[key_dtype]

    return get


@pytest.mark.parametrize(("key_dtype", "restore_shards"), [(tf.int64, 1), (tf.int64, 3), (tf.string, 3)])
def test_a_whole_checkpoint_and_its_delta_restore_the_rows_of_a_whole_checkpoint_of_the_deltas_step(
    saved, key_dtype, restore_shards
):
    base, reference, at_delta = saved(key_dtype)
    assert set(at_delta["rows"]) == set(_ids([1, 2, 3, 6, 7, 8, 9], key_dtype)), at_delta["rows"]
    model = _Model(restore_shards, key_dtype)
    model.restore(reference)
    whole = model.content()
    model.restore(base)  # a restore replaces the shards' content: the delta merges into the base's alone
    assert model.content() == whole == at_delta


def test_ids_still_counting_towards_admission_restore_with_their_counts(tmp_path):
    base, _, at_delta = _train_save_and_delta(tmp_path, admit_after=2)
    assert at_delta["meta"][8][0] == 1 and 8 not in at_delta["rows"], at_delta  # seen once: counted, no row
    merged = _Model(2, admit_after=2)
    merged.restore(base)
    assert merged.content() == at_delta


def test_a_delta_holds_only_the_changed_rows_and_the_kept_ids(saved):
    base, _, _ = saved(tf.int64)
    state = delta_files.read_state(os.path.dirname(base))
    reader = tf.train.load_checkpoint(os.path.join(os.path.dirname(base), state.delta))
    saved_tensors = {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map() if n.startswith("model/t/")}
    rows = {
        int(i) for n, ids in saved_tensors.items() if n.startswith("model/t/rows/") and n.endswith("keys") for i in ids
    }
    kept = {int(i) for n, ids in saved_tensors.items() if n.startswith("model/t/kept/") for i in ids}
    assert rows == {2, 3, 7, 8, 9}  # all seen since the base's step 2 (3 again after its eviction)
    assert kept == {1, 6}  # last seen at step 1, before the base: their entries are the base's
    assert int(reader.get_tensor("global_step")) == 5


def _model_fn(features, labels, mode, params):
    predictions = tf.reduce_sum(de.lookup(de.get_table("t", 2, evict_after_steps=3), features), -1)
    if mode == ps_toolkit.ModeKeys.PREDICT:
        return ps_toolkit.ModelSpec(mode, predictions=predictions)
    return ps_toolkit.ModelSpec(mode, loss=tf.reduce_mean(tf.square(predictions - labels)))


def _input_fn(input_context):
    return tf.data.Dataset.from_tensors((tf.constant([1], tf.int64), tf.constant([0.0])))


def _eval_input_fn():
    ids = tf.constant([1, 2, 3, 6, 7, 8, 9, 400, 5000, 12345], tf.int64)
    return tf.data.Dataset.from_tensors((ids, tf.ones([10])))


def _evaluation(checkpoint_dir: str) -> dict:
    """The evaluator's result on ``checkpoint_dir``'s checkpoints, up to global step 5."""
    definition = ModelDefinition(_model_fn, _input_fn, eval_input_fn=_eval_input_fn)
    config = TrainConfig(train_steps=5, checkpoint_dir=checkpoint_dir)
    role = types.SimpleNamespace(task_type="evaluator", task_index=0)
    return evaluator.evaluate_checkpoints(role, config, definition, idle_timeout_secs=5)


def test_the_evaluator_evaluates_a_whole_checkpoint_merged_with_its_delta(saved):
    base, reference, _ = saved(tf.int64)
    merged, whole = _evaluation(os.path.dirname(base)), _evaluation(os.path.dirname(reference))
    # The whole checkpoint alone is at step 2: the evaluator would wait for step 5 and give up.
    assert merged["global_step"] == whole["global_step"] == 5, merged
    assert merged["eval"] == whole["eval"], (merged, whole)


def _predictions(checkpoint_dir: str, export_dir: str, ids) -> list:
    definition = ModelDefinition(_model_fn, _input_fn)
    export.export_saved_model(definition, None, checkpoint_dir, export_dir)
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        signature = tf.compat.v1.saved_model.load(session, ["serve"], export_dir).signature_def["serving_default"]
        return session.run(signature.outputs["output"].name, {signature.inputs["features"].name: ids}).tolist()


def test_the_export_of_a_whole_checkpoint_and_its_delta_predicts_as_that_of_a_whole_checkpoint_of_its_step(
    saved, tmp_path
):
    base, reference, _ = saved(tf.int64)
    ids = [1, 2, 3, 6, 7, 8, 9, 400, 5000, 12345]
    merged = _predictions(os.path.dirname(base), str(tmp_path / "merged"), ids)
    assert merged == _predictions(os.path.dirname(reference), str(tmp_path / "whole"), ids)


def test_plain_readers_and_the_chiefs_checks_see_the_whole_checkpoint(saved):
    base, _, _ = saved(tf.int64)
    checkpoint_dir = os.path.dirname(base)
    assert any(delta_files.is_delta(path[: -len(".index")]) for path in os.listdir(checkpoint_dir) if ".index" in path)
    assert tf.train.latest_checkpoint(checkpoint_dir) == base
    assert tf.compat.v1.train.get_checkpoint_state(checkpoint_dir).all_model_checkpoint_paths == [base]
    assert checkpoints.prepare_checkpoint_dir(checkpoint_dir) == base
    assert int(tf.train.load_checkpoint(base).get_tensor("global_step")) == 2


def test_a_delta_whose_base_is_gone_is_one_warning_and_the_whole_checkpoint_restores_alone(tmp_path, caplog):
    model, checkpoint_dir, hook, listener = _with_hook(tmp_path, _Model(shards=2), every_steps=1)
    model.train([1, 2])
    older = model.save(os.path.join(checkpoint_dir, "model.ckpt"), 1)
    model.train([3])
    base = model.save(os.path.join(checkpoint_dir, "model.ckpt"), 2)
    listener.after_save(model.session, 2)
    model.train([4])
    assert hook.write(model.session)["global_step"] == 3
    for name in os.listdir(checkpoint_dir):
        if name.startswith(os.path.basename(base) + ".") and ".delta-" not in name:
            os.remove(os.path.join(checkpoint_dir, name))
    assert checkpoints.prepare_checkpoint_dir(checkpoint_dir) == older  # the state file repaired to the older one
    restored = _Model(shards=2)
    with caplog.at_level(logging.WARNING):
        restored.restore(tf.train.latest_checkpoint(checkpoint_dir))
    lines = [r.getMessage() for r in caplog.records if "delta checkpoint" in r.getMessage()]
    assert lines == [
        "delta checkpoint model.ckpt-2.delta-3 (global step 3): its base checkpoint model.ckpt-2 is gone; "
        "restoring model.ckpt-1 alone"
    ], lines
    content = restored.content()
    assert content["global_step"] == 1 and set(content["rows"]) == {1, 2}, content


def test_a_damaged_delta_is_one_warning_and_the_whole_checkpoint_restores_alone(tmp_path, caplog):
    model, checkpoint_dir, hook, listener = _with_hook(tmp_path, _Model(shards=2), every_steps=1)
    model.train([1, 2])
    base = model.save(os.path.join(checkpoint_dir, "model.ckpt"), 1)
    listener.after_save(model.session, 1)
    model.train([3])
    delta = hook.write(model.session)["prefix"]
    for name in os.listdir(checkpoint_dir):
        if name.startswith(os.path.basename(delta) + ".data"):
            with open(os.path.join(checkpoint_dir, name), "r+b") as file:
                file.truncate(os.path.getsize(file.name) // 2)
    restored = _Model(shards=2)
    with caplog.at_level(logging.WARNING):
        restored.restore(base)
    lines = [r.getMessage() for r in caplog.records if "delta checkpoint" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith(f"delta checkpoint {os.path.basename(delta)} could not be merged")
    assert lines[0].endswith("; restoring model.ckpt-1 alone"), lines
    content = restored.content()
    assert content["global_step"] == 1 and set(content["rows"]) == {1, 2}, content


def test_the_hook_writes_a_delta_every_n_steps_keeps_the_newest_only_and_none_at_the_last_step(tmp_path):
    model, checkpoint_dir, hook, listener = _with_hook(tmp_path, _Model(shards=2), every_steps=2, last_step=6)
    model.save(os.path.join(checkpoint_dir, "model.ckpt"), 0)
    listener.after_save(model.session, 0)

    def run(stop_requested=False):
        model.train([int(model.session.run(model.step)) + 1])
        context = types.SimpleNamespace(session=model.session, stop_requested=stop_requested)
        hook.after_run(context, types.SimpleNamespace(results=model.session.run(model.step)))
        return hook.count

    assert [run(), run(), run(), run(stop_requested=True), run(), run()] == [0, 1, 1, 1, 2, 2]
    # Steps 1-6: deltas at 2 and 5 (3 steps after the last one: a stop was asked at step 4), none at 6.
    assert delta_files.read_state(checkpoint_dir).delta == "model.ckpt-0.delta-5"
    deltas = {name.split(".delta-")[1].split(".")[0] for name in os.listdir(checkpoint_dir) if ".delta-" in name}
    assert deltas == {"5"}, deltas


def test_a_model_without_tables_is_refused_deltas_in_one_line():
    with tf.Graph().as_default():
        tf.compat.v1.train.get_or_create_global_step()
        saver = DeltaMergingSaver()
        with pytest.raises(ConfigError, match="need a model with dynamic tables"):
            DeltaCheckpointHook(saver, "/tmp/unused", every_steps=1)


def test_the_hook_judges_its_interval_by_the_global_step_after_the_runs_loop(tmp_path):
    # With the in-graph loop a run's steps come after the step read as it starts: the hook fetches the step
    # after the loop, or a delta every 50 steps came every 80 (one 20-step run late, then rounded to runs).
    model = _Model(shards=1)
    with model.graph.as_default():
        after_loop = tf.identity(model.step + 20, name="after_loop")
    _, _, hook, _ = _with_hook(tmp_path, model, every_steps=50, step_after_run=after_loop)
    assert hook.before_run(None).fetches is after_loop
    plain_model = _Model(shards=1)
    _, _, plain, _ = _with_hook(tmp_path, plain_model, every_steps=50)
    assert plain.before_run(None).fetches is plain_model.step  # no loop: the global step itself
