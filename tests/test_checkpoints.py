"""Checkpoint validation at start-up: fall back to the newest readable one, never silently to 0."""

import logging
import os

import numpy as np
import pytest
import tensorflow as tf

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.task.checkpoints import check_model_matches_checkpoint, checkpoint_problem, prepare_checkpoint_dir


@pytest.fixture
def ckpt_dir(tmp_path):
    """Checkpoints at steps 100 and 200 of a 1000-float variable, as the chief's Saver writes them."""
    with tf.Graph().as_default():
        step = tf.compat.v1.train.get_or_create_global_step()
        weights = tf.compat.v1.get_variable("w", initializer=np.arange(1000, dtype=np.float32))
        saver = tf.compat.v1.train.Saver(max_to_keep=5)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            for value in (100, 200):
                session.run([step.assign(value), weights.assign(weights + 1)])
                saver.save(session, str(tmp_path / "model.ckpt"), global_step=value)
    return tmp_path


def data_file(ckpt_dir, step):
    return ckpt_dir / f"model.ckpt-{step}.data-00000-of-00001"


def restored_step(ckpt_dir):
    reader = tf.compat.v1.train.NewCheckpointReader(tf.train.latest_checkpoint(str(ckpt_dir)))
    return int(reader.get_tensor("global_step"))


def test_healthy_dir_uses_the_latest(ckpt_dir, caplog):
    with caplog.at_level(logging.WARNING):
        assert prepare_checkpoint_dir(str(ckpt_dir)).endswith("model.ckpt-200")
    assert not caplog.records


def test_empty_or_missing_dir_is_a_fresh_start(tmp_path):
    assert prepare_checkpoint_dir(str(tmp_path)) is None
    assert prepare_checkpoint_dir(str(tmp_path / "absent")) is None


@pytest.mark.parametrize("damage", ["garbage", "deleted"])
def test_bad_state_file_recovers_the_newest_checkpoint(ckpt_dir, damage, caplog):
    state = ckpt_dir / "checkpoint"
    if damage == "garbage":
        state.write_bytes(b"\x00\xffnot a text proto {{{")
    else:
        state.unlink()
    with caplog.at_level(logging.WARNING):
        assert prepare_checkpoint_dir(str(ckpt_dir)).endswith("model.ckpt-200")
    assert "state file" in caplog.text and "model.ckpt-200" in caplog.text
    assert restored_step(ckpt_dir) == 200  # repaired: TensorFlow's own lookup now finds it


def test_missing_index_falls_back(ckpt_dir, caplog):
    (ckpt_dir / "model.ckpt-200.index").unlink()
    with caplog.at_level(logging.WARNING):
        assert prepare_checkpoint_dir(str(ckpt_dir)).endswith("model.ckpt-100")
    assert ".index file is missing" in caplog.text
    assert restored_step(ckpt_dir) == 100


def test_truncated_data_falls_back(ckpt_dir):
    path = data_file(ckpt_dir, 200)
    path.write_bytes(path.read_bytes()[:100])
    assert checkpoint_problem(str(ckpt_dir / "model.ckpt-200")) is not None
    assert prepare_checkpoint_dir(str(ckpt_dir)).endswith("model.ckpt-100")


def test_flipped_bytes_fail_the_crc_and_fall_back(ckpt_dir):
    path = data_file(ckpt_dir, 200)
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    assert "Checksum does not match" in checkpoint_problem(str(ckpt_dir / "model.ckpt-200"))
    assert prepare_checkpoint_dir(str(ckpt_dir)).endswith("model.ckpt-100")


def test_all_unreadable_is_refused(ckpt_dir):
    for step in (100, 200):
        data_file(ckpt_dir, step).write_bytes(b"")
    with pytest.raises(ConfigError, match="holds checkpoints but none is readable") as info:
        prepare_checkpoint_dir(str(ckpt_dir))
    assert "\n" not in str(info.value)


def test_state_file_without_checkpoints_is_refused(tmp_path):
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-500"\n')
    with pytest.raises(ConfigError, match="names model.ckpt-500, but no checkpoint files exist"):
        prepare_checkpoint_dir(str(tmp_path))


def test_orphaned_temp_dirs_are_removed(ckpt_dir):
    orphan = ckpt_dir / "model.ckpt-300_temp" / "part-00000-of-00001"
    orphan.mkdir(parents=True)
    (orphan / "junk").write_bytes(b"x")
    prepare_checkpoint_dir(str(ckpt_dir))
    assert not os.path.exists(ckpt_dir / "model.ckpt-300_temp")


def model_variables(shapes: dict, partitioned: str | None = None) -> list:
    """The global variables of a model with these {name: shape} weights, in a fresh graph."""
    tf.compat.v1.get_default_graph()
    tf.compat.v1.train.get_or_create_global_step()
    for name, shape in shapes.items():
        partitioner = tf.compat.v1.fixed_size_partitioner(2) if name == partitioned else None
        tf.compat.v1.get_variable(name, shape, partitioner=partitioner)
    return tf.compat.v1.global_variables()


def test_a_matching_checkpoint_says_where_it_resumes(ckpt_dir, caplog):
    with tf.Graph().as_default(), caplog.at_level(logging.INFO):
        assert check_model_matches_checkpoint(str(ckpt_dir), model_variables({"w": [1000]})) == 200
    assert f"resuming from global step 200 in {ckpt_dir}" in caplog.text


def test_no_checkpoint_is_a_fresh_start(tmp_path):
    with tf.Graph().as_default():
        assert check_model_matches_checkpoint(str(tmp_path / "none"), model_variables({"w": [1000]})) is None


@pytest.mark.parametrize(
    "shapes, expected",
    [
        ({"w": [1000], "hidden0/biases": [128]}, "the model's variable hidden0/biases [128] is not in the checkpoint"),
        ({}, "the checkpoint's variable w [1000] is not in the model"),
        ({"w": [784]}, "variable w is [1000] in the checkpoint, [784] in the model"),
    ],
)
def test_a_checkpoint_of_another_model_is_refused_naming_the_first_difference(ckpt_dir, shapes, expected):
    with tf.Graph().as_default(), pytest.raises(ConfigError) as raised:
        check_model_matches_checkpoint(str(ckpt_dir), model_variables(shapes))
    message = str(raised.value)
    assert expected in message and str(ckpt_dir) in message
    assert "\n" not in message


def test_a_partitioned_variable_matches_its_whole_shape(ckpt_dir):
    with tf.Graph().as_default():
        assert check_model_matches_checkpoint(str(ckpt_dir), model_variables({"w": [1000]}, partitioned="w")) == 200
