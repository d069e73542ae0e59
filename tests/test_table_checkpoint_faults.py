"""A table checkpoint whose buckets disagree with the model: one warning and the newest whole one, or exit 2.

Checkpoints of the example's click model (examples/dynamic_clicks), trained on
an in-process cluster, are rewritten with a bucket's tensors left out or
its values one row short (every tensor's CRC good), as a damaged disk or an
interrupted copy leaves them; the chief then resumes from the newest whole
checkpoint, or refuses in one line when none is.
"""

import logging
import os
import sys

import numpy as np
import pytest
import tensorflow as tf

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.launch.local_cluster import InProcessCluster
from ps_toolkit.task import table_checkpoints
from ps_toolkit.task.roles import trainer
from ps_toolkit.training.config import TrainConfig
from ps_toolkit.training.model_api import ModelDefinition

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "dynamic_clicks")
sys.path.insert(0, EXAMPLE)
import dynamic_clicks  # noqa: E402

BUCKET = "model/user/rows/bucket_05"


def _train(checkpoint_dir, train_steps: int) -> dict:
    config = TrainConfig(
        checkpoint_dir=str(checkpoint_dir), train_steps=train_steps, batch_size=32, save_checkpoint_steps=10
    )
    definition = ModelDefinition(dynamic_clicks.model_fn, dynamic_clicks.input_fn, None, {}, name="dynamic_clicks")
    with InProcessCluster(num_ps=1, num_workers=1) as cluster:
        return trainer.train(cluster.cluster_config("worker", 0), cluster.targets["worker"][0], config, definition)


def _rewrite(prefix: str, change) -> None:
    """Writes checkpoint ``prefix`` again with ``change(name, array)`` for each tensor (None leaves it out)."""
    reader = tf.train.load_checkpoint(prefix)
    tensors = {name: change(name, reader.get_tensor(name)) for name in reader.get_variable_to_shape_map()}
    tensors = {name: value for name, value in tensors.items() if value is not None}
    for path in tf.io.gfile.glob(prefix + ".*"):
        os.remove(path)
    _write(prefix, tensors)


def _write(prefix: str, tensors: dict) -> None:
    """Writes ``tensors`` (name -> array) as the checkpoint ``prefix``."""
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        names = sorted(tensors)
        session.run(
            tf.raw_ops.SaveV2(
                prefix=prefix,
                tensor_names=names,
                shape_and_slices=[""] * len(names),
                tensors=[tf.constant(tensors[name]) for name in names],
            )
        )


def _without_bucket(name, value):
    return None if name.startswith(BUCKET + "/") else value


def _short_values(name, value):
    return value[:-1] if name == BUCKET + "/values" else value


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A folder holding the checkpoints of steps 0, 10 and 20 (saved every 10 steps)."""
    checkpoint_dir = tmp_path_factory.mktemp("trained")
    assert _train(checkpoint_dir, 20)["global_step"] == 20
    reader = tf.train.load_checkpoint(str(checkpoint_dir / "model.ckpt-20"))
    assert reader.get_variable_to_shape_map()[BUCKET + "/keys"][0] > 1  # a bucket with rows to lose
    return checkpoint_dir


def _copy(trained, tmp_path):
    copy = tmp_path / "ckpt"
    copy.mkdir()
    for name in os.listdir(trained):
        if os.path.isfile(trained / name):
            (copy / name).write_bytes((trained / name).read_bytes())
    # The state file names its checkpoints by absolute path: name the copies.
    steps = [str(copy / f"model.ckpt-{step}") for step in (0, 10, 20)]
    tf.compat.v1.train.update_checkpoint_state(str(copy), steps[-1], all_model_checkpoint_paths=steps)
    return copy


@pytest.mark.parametrize(
    ("damage", "fault"),
    [
        (_without_bucket, f"{BUCKET}/keys is not in the checkpoint (and 1 more faults)"),
        (_short_values, f"{BUCKET} holds {{keys}} keys but {{values}} values"),
    ],
    ids=["missing bucket", "short values"],
)
def test_a_damaged_table_checkpoint_is_one_warning_and_the_run_resumes_from_the_one_before(
    trained, tmp_path, caplog, damage, fault
):
    checkpoint_dir = _copy(trained, tmp_path)
    newest = str(checkpoint_dir / "model.ckpt-20")
    keys = tf.train.load_checkpoint(newest).get_variable_to_shape_map()[BUCKET + "/keys"][0]
    _rewrite(newest, damage)
    with caplog.at_level(logging.INFO):
        result = _train(checkpoint_dir, 30)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "ckpt" in r.getMessage()]
    assert len(warnings) == 1, warnings
    expected = fault.format(keys=keys, values=keys - 1)
    assert warnings[0] == (
        f"checkpoint dir {checkpoint_dir}: model.ckpt-20: {expected}; "
        "resuming from model.ckpt-10, the newest readable checkpoint"
    )
    assert f"resuming from global step 10 in {checkpoint_dir}" in caplog.messages
    assert result["global_step"] == 30
    assert tf.train.latest_checkpoint(str(checkpoint_dir)).endswith("model.ckpt-30")


def test_every_checkpoint_damaged_is_one_line_naming_each(trained, tmp_path):
    checkpoint_dir = _copy(trained, tmp_path)
    for step in (0, 10, 20):
        _rewrite(str(checkpoint_dir / f"model.ckpt-{step}"), _without_bucket)
    with pytest.raises(ConfigError) as error:
        _train(checkpoint_dir, 30)
    line = str(error.value)
    assert "\n" not in line
    assert line.startswith(f"checkpoint dir {checkpoint_dir} holds checkpoints but none is readable (")
    for step in (20, 10, 0):
        assert f"model.ckpt-{step}: {BUCKET}/keys is not in the checkpoint (and 1 more faults)" in line, line


def test_table_faults_name_each_kind_of_mismatch(tmp_path):
    keys, values = "t/rows/bucket_00/keys", "t/rows/bucket_00/values"
    specs = {keys: (tf.int64, tf.TensorShape([None])), values: (tf.float32, tf.TensorShape([None, 2]))}
    cases = {
        "another dtype": (
            {keys: np.zeros([3], np.int32), values: np.zeros([3, 2], np.float32)},
            f"{keys} is int32 in the checkpoint, int64 in the model",
        ),
        "another dim": (
            {keys: np.zeros([3], np.int64), values: np.zeros([3, 4], np.float32)},
            f"{values} is [3, 4] in the checkpoint; the model's is ['any', 2]",
        ),
        "extra bucket": (
            {
                keys: np.zeros([1], np.int64),
                values: np.zeros([1, 2], np.float32),
                "t/rows/bucket_64/keys": np.zeros([1], np.int64),
            },
            "t/rows/bucket_64/keys is a bucket the model's table does not have",
        ),
        "values missing": ({keys: np.zeros([1], np.int64)}, f"{values} is not in the checkpoint"),
    }
    for case, (tensors, fault) in cases.items():
        prefix = str(tmp_path / case.replace(" ", "_") / "model.ckpt-1")
        _write(prefix, tensors)
        assert table_checkpoints.table_faults(prefix, specs) == [fault], case
    assert table_checkpoints.table_faults(prefix, {}) == []


def test_every_checkpoint_damaged_ends_the_chief_with_one_line_and_exit_2(trained, tmp_path):
    from tests.taskrun import REPO, python_command, run_tasks
    from tests.test_bad_input import OK_HOSTS, assert_clean_failure

    checkpoint_dir = _copy(trained, tmp_path)
    for step in (10, 20):
        _rewrite(str(checkpoint_dir / f"model.ckpt-{step}"), _short_values)
    _rewrite(str(checkpoint_dir / "model.ckpt-0"), _without_bucket)  # its tables are empty: no value to cut
    args = OK_HOSTS + ["--job_name=worker", "--task_index=0", f"--checkpoint_dir={checkpoint_dir}"]
    args += ["--model_fn=dynamic_clicks:model_fn", "--input_fn=dynamic_clicks:input_fn"]
    command = python_command(os.path.join(REPO, "scripts", "run_task.py"), *args)
    outcome = run_tasks({"chief": command}, timeout=120, env={"PYTHONPATH": EXAMPLE})["chief"]
    assert_clean_failure(outcome, f"checkpoint dir {checkpoint_dir} holds checkpoints but none is readable (")
    assert f"model.ckpt-20: {BUCKET} holds" in outcome.stderr, outcome.describe()
    assert f"model.ckpt-0: {BUCKET}/keys is not in the checkpoint" in outcome.stderr, outcome.describe()
