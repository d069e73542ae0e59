"""Following a folder of record files: arrival order, one replica per file, the position across a restart,
bad files (skip or stop), a folder that does not exist, and a training job with no step limit."""

import dataclasses
import json
import os
import threading

import pytest
import tensorflow as tf

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.launch.local_cluster import InProcessCluster
from ps_toolkit.task.roles import trainer
from ps_toolkit.training import folder_input, stop_request
from ps_toolkit.training.config import TrainConfig
from ps_toolkit.training.model_api import ModelDefinition
from tests.user_models import folder_records


def write_part(folder, name, ids, mtime=None):
    """A record file of the ids' decimal texts, renamed into place as a producer should."""
    path = os.path.join(folder, name)
    with tf.io.TFRecordWriter(path + ".tmp") as writer:
        for value in ids:
            writer.write(str(value).encode())
    os.rename(path + ".tmp", path)
    if mtime is not None:
        os.utime(path, ns=(mtime, mtime))
    return path


class _Reader:
    """A FolderInput read in a plain session, as the trainer's hooks would drive it."""

    def __init__(self, pattern, num_replicas=1, replica=0, restore_from=None, **options):
        self.graph = tf.Graph()
        with self.graph.as_default():
            self.input = folder_input.FolderInput(pattern, num_replicas, replica)
            self.input.configure(poll_secs=0.02, on_bad_file=options.get("on_bad_file", "skip"))
            # With the options the training input gives it: no prefetch that tf.data adds under load.
            dataset = self.input.dataset().with_options(folder_input.exact_position_options())
            self.next = tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
            self.saver = tf.compat.v1.train.Saver()
            self.session = tf.compat.v1.Session(graph=self.graph)
            if restore_from:
                self.saver.restore(self.session, restore_from)
            else:
                self.session.run(tf.compat.v1.global_variables_initializer())
            self.hook = self.input.hook()
            self.hook.after_create_session(self.session, None)

    def take(self, count):
        return [self.session.run(self.next).decode() for _ in range(count)]

    def save(self, prefix):
        with self.graph.as_default():
            self.hook.push_now(self.session)
            return self.saver.save(self.session, prefix)

    def close(self):
        stop_request.request()  # ends the generator TensorFlow reads ahead, which waits for files
        self.session.close()
        stop_request.clear()


@pytest.fixture(autouse=True)
def _no_stop_request():
    stop_request.clear()
    yield
    stop_request.clear()


def test_files_are_read_in_order_of_arrival_each_by_one_replica(tmp_path):
    names = [f"part-{i}.tfrecord" for i in range(6)]
    for i, name in enumerate(names):  # arrival order is the reverse of the names' order
        write_part(tmp_path, name, [10 * i, 10 * i + 1], mtime=(100 - i) * 10**9)
    pattern = str(tmp_path / "part-*.tfrecord")
    read = []
    for replica in range(2):
        reader = _Reader(pattern, num_replicas=2, replica=replica)
        mine = [n for n in reversed(names) if folder_input.replica_of(n, 2) == replica]
        read.append(reader.take(2 * len(mine)))
        assert read[-1] == [str(10 * int(n[5]) + k) for n in mine for k in (0, 1)]
        reader.close()
    assert sorted(read[0] + read[1], key=int) == [str(10 * i + k) for i in range(6) for k in (0, 1)]


def test_a_restart_goes_on_from_the_saved_position_mid_file(tmp_path):
    write_part(tmp_path, "part-0.tfrecord", range(0, 5), mtime=1 * 10**9)
    write_part(tmp_path, "part-1.tfrecord", range(5, 10), mtime=2 * 10**9)
    pattern = str(tmp_path / "part-*.tfrecord")
    first = _Reader(pattern)
    taken = first.take(7)  # part-0 whole, 2 records of part-1
    prefix = first.save(str(tmp_path / "ckpt" / "model"))
    position = json.loads(first.session.run(first.input._variables[0]))
    assert position == {"done": ["part-0.tfrecord"], "file": "part-1.tfrecord", "records": 2}
    first.close()
    write_part(tmp_path, "part-2.tfrecord", range(10, 13), mtime=3 * 10**9)
    second = _Reader(pattern, restore_from=prefix)
    taken += second.take(6)
    second.close()
    assert taken == [str(i) for i in range(13)]


def test_a_truncated_file_is_skipped_with_one_line_naming_it(tmp_path, caplog):
    write_part(tmp_path, "part-0.tfrecord", [1, 2], mtime=1 * 10**9)
    bad = write_part(tmp_path, "part-1.tfrecord", [3, 4, 5], mtime=2 * 10**9)
    os.truncate(bad, os.path.getsize(bad) - 3)
    os.utime(bad, ns=(2 * 10**9, 2 * 10**9))  # the truncation made it the newest
    (tmp_path / "part-2.tfrecord").write_bytes(b"not a record file at all")
    os.utime(tmp_path / "part-2.tfrecord", ns=(3 * 10**9, 3 * 10**9))
    write_part(tmp_path, "part-3.tfrecord", [6], mtime=4 * 10**9)
    reader = _Reader(str(tmp_path / "part-*.tfrecord"))
    with caplog.at_level("WARNING"):
        assert reader.take(3) == ["1", "2", "6"]  # part-1 and part-2 were checked and skipped before part-3
    reader.close()
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(bad in line and "truncated" in line for line in warned), warned
    assert any("part-2.tfrecord" in line for line in warned), warned


def test_a_bad_file_with_stop_ends_the_input_naming_the_file(tmp_path):
    write_part(tmp_path, "part-0.tfrecord", [1], mtime=1 * 10**9)
    (tmp_path / "part-1.tfrecord").write_bytes(b"\x00" * 40)
    os.utime(tmp_path / "part-1.tfrecord", ns=(2 * 10**9, 2 * 10**9))
    reader = _Reader(str(tmp_path / "part-*.tfrecord"), on_bad_file="stop")
    assert reader.take(1) == ["1"]
    with pytest.raises(tf.errors.OutOfRangeError):
        reader.take(1)
    assert "part-1.tfrecord" in reader.input.failure and "stop" in reader.input.failure
    reader.close()


def test_a_folder_that_does_not_exist_is_refused(tmp_path):
    with tf.Graph().as_default(), pytest.raises(ConfigError, match="input folder .*nowhere.* does not exist"):
        folder_input.FolderInput(str(tmp_path / "nowhere" / "part-*"), 1, 0)


def test_a_stop_request_ends_a_waiting_input(tmp_path):
    reader = _Reader(str(tmp_path / "part-*.tfrecord"))
    timer = threading.Timer(0.3, stop_request.request)
    timer.start()
    with pytest.raises(tf.errors.OutOfRangeError):
        reader.take(1)  # nothing to read until the request ends the input
    timer.join()
    reader.close()


def _definition(pattern, ids):
    return ModelDefinition(
        model_fn=folder_records.model_fn,
        input_fn=folder_records.input_fn,
        params={"pattern": pattern, "ids": ids},
        name="folder_records",
    )


def _train_until_all_read(checkpoint_dir, definition, total, delivered):
    """Trains with no step limit in a fresh cluster (so the second call restores from the checkpoint);
    notes each id the input delivers to a step in ``delivered``, and requests a stop once ``total`` came."""
    config = TrainConfig(train_steps=0, checkpoint_dir=checkpoint_dir, save_checkpoint_steps=3, batch_size=4)
    before = len(delivered)

    def stop_when_done(_global_step):
        if len(delivered) - before >= total:
            stop_request.request()

    def counting_input_fn(input_context, params):
        def note(ids):
            delivered.extend(ids.tolist())
            return ids

        def noted(features, labels):
            ids = tf.numpy_function(note, [features["id"]], tf.int64, stateful=True)
            return {"id": tf.ensure_shape(ids, [None])}, labels

        return folder_records.input_fn(input_context, params).map(noted)

    with InProcessCluster(num_ps=1, num_workers=1) as cluster:
        return trainer.train(
            cluster.cluster_config("worker", 0),
            cluster.targets["worker"][0],
            config,
            dataclasses.replace(definition, input_fn=counting_input_fn),
            on_progress=stop_when_done,
        )


def test_a_job_with_no_step_limit_stops_on_request_and_resumes_each_record_once(tmp_path):
    data = tmp_path / "clicks"
    data.mkdir()
    # 8 records a file, batches of 4: a batch never waits for a file that does not come.
    for i in range(3):
        write_part(data, f"part-{i}.tfrecord", range(8 * i, 8 * i + 8), mtime=(i + 1) * 10**9)
    checkpoint_dir = str(tmp_path / "ckpt")
    definition = _definition(str(data / "part-*.tfrecord"), ids=48)
    delivered = []
    first = _train_until_all_read(checkpoint_dir, definition, 24, delivered)
    assert first["global_step"] >= 6, first
    saved = tf.train.load_checkpoint(checkpoint_dir)
    position = json.loads(saved.get_tensor("folder_input/position_replica_0") or b"{}")
    assert position.get("done") == [f"part-{i}.tfrecord" for i in range(3)], (position, first)
    for i in range(3, 6):
        write_part(data, f"part-{i}.tfrecord", range(8 * i, 8 * i + 8), mtime=(i + 1) * 10**9)
    stop_request.clear()
    _train_until_all_read(checkpoint_dir, definition, 24, delivered)  # restores the positions saved at the stop
    assert sorted(delivered) == list(range(48)), f"in order delivered: {delivered}"
