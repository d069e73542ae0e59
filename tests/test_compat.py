"""The legacy TF 1.x surface: removed-symbol errors, the MNIST reader, and old scripts run through run_legacy.py."""

import json
import os
import sys

import numpy as np
import pytest
from fixtures_legacy.launch import RUN_LEGACY
from fixtures_legacy.mnist_idx import write_digits_idx
from taskrun import run_script

from ps_toolkit.base.errors import ConfigError
from ps_toolkit_compat import removed

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures_legacy")


def run_legacy(*args, timeout=90):
    """``python scripts/run_legacy.py ARGS``, forked from the tests' fork server (tests/taskrun.py)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return run_script([sys.executable, RUN_LEGACY, *args], timeout=timeout, env=env)


def explain(proc) -> str:
    return f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"


def test_removed_symbol_message_names_symbol_and_replacement():
    assert removed.message("contrib.slim.nets") == (
        "tf.contrib.slim.nets was removed from TensorFlow 2.21 and is not in the compat layer; "
        "use the tf-slim package (pip install tf-slim) or tf.keras layers"
    )
    assert "tf.estimator" in removed.message("contrib.learn")
    assert removed.replacement_for("no.such.thing") == removed.DEFAULT_REPLACEMENT
    assert isinstance(removed.RemovedSymbolError("contrib.rnn"), AttributeError)
    assert not isinstance(removed.RemovedModuleError("contrib.rnn"), ModuleNotFoundError)


@pytest.fixture(scope="module")
def digits_dir(tmp_path_factory):
    return write_digits_idx(str(tmp_path_factory.mktemp("mnist")))


def test_read_data_sets_splits_like_tf1(digits_dir):
    from ps_toolkit_compat.mnist_input_data import read_data_sets

    mnist = read_data_sets(digits_dir, one_hot=True)
    assert (mnist.train.num_examples, mnist.validation.num_examples, mnist.test.num_examples) == (2485, 5000, 300)
    assert mnist.test.images.shape == (300, 784) and mnist.test.images.dtype == np.float32
    assert mnist.test.images.min() >= 0.0 and mnist.test.images.max() <= 1.0
    assert mnist.test.labels.shape == (300, 10) and np.all(mnist.test.labels.sum(axis=1) == 1)
    plain = read_data_sets(digits_dir, validation_size=0)
    assert plain.train.num_examples == 7485 and plain.train.labels.shape == (7485,)


def test_next_batch_covers_an_epoch_then_wraps(digits_dir):
    from ps_toolkit_compat.mnist_input_data import read_data_sets

    train = read_data_sets(digits_dir, validation_size=0, seed=3).train
    seen = [train.next_batch(1497)[1] for _ in range(5)]
    assert train.epochs_completed == 1
    assert np.array_equal(np.sort(np.concatenate(seen)), np.sort(train.labels))
    images, labels = train.next_batch(100)  # crosses into the second epoch without a short batch
    assert images.shape == (100, 784) and labels.shape == (100,)


def test_two_readers_without_a_seed_shuffle_differently(digits_dir):
    from ps_toolkit_compat.mnist_input_data import read_data_sets

    first, second = (read_data_sets(digits_dir, validation_size=0).train for _ in range(2))
    assert not np.array_equal(first.next_batch(100)[1], second.next_batch(100)[1])


def test_missing_mnist_files_are_one_clear_error(tmp_path):
    from ps_toolkit_compat.mnist_input_data import read_data_sets

    with pytest.raises(ConfigError, match=r"has no train-images-idx3-ubyte.gz; .*does not download"):
        read_data_sets(str(tmp_path))
    with pytest.raises(ConfigError, match=r"folder .*nowhere does not exist"):
        read_data_sets(str(tmp_path / "nowhere"))


def test_legacy_surface_under_run_legacy():
    proc = run_legacy(os.path.join(FIXTURES, "surface_probe.py"), "--steps=5", "--job_name=worker", "--ps_hosts=a:1")
    assert proc.returncode == 0, explain(proc)
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    # tf.app.run parsed the script's own flag and left the undefined cluster flags to main().
    assert report["steps"] == 5 and report["argv"] == ["--job_name=worker", "--ps_hosts=a:1"]
    assert report["eager"] is False
    assert report["layers_dense"] == [None, 3] and report["compat_v1_layers_dense"] == [None, 2]
    assert report["contrib_training"] == [True, True, True] and report["read_data_sets"] is True
    assert report["train"] == [
        "Supervisor",
        "SyncReplicasOptimizer",
        "MonitoredTrainingSession",
        "replica_device_setter",
    ]
    errors = report["errors"]
    assert errors["tf.contrib.slim"].startswith("RemovedSymbolError: tf.contrib.slim was removed")
    assert errors["tf.estimator.Estimator"] is None  # the real estimator (tests/test_estimator_compat.py)
    assert errors["import tensorflow.contrib.rnn"].startswith("RemovedModuleError: tf.contrib.rnn was removed")
    assert "seq2seq" in errors["from tensorflow.contrib import seq2seq"]
    assert report["hasattr_contrib_slim"] is False


def test_removed_symbol_ends_the_script_with_one_line_and_status_2():
    proc = run_legacy(os.path.join(FIXTURES, "uses_removed.py"))
    assert proc.returncode == 2, explain(proc)
    line = proc.stderr.strip().splitlines()[-1]
    assert line.endswith("uses_removed.py:5: error: " + removed.message("contrib.slim")), explain(proc)
    assert "Traceback" not in proc.stderr


def test_a_removed_name_is_refused_naming_the_module_and_line_that_used_it():
    proc = run_legacy(os.path.join(FIXTURES, "uses_removed_in_helper.py"))
    assert proc.returncode == 2, explain(proc)
    line = proc.stderr.strip().splitlines()[-1]
    assert line.endswith("removed_helper.py:7: error: " + removed.message("contrib.rnn")), explain(proc)


def test_contrib_names_tensorflow_still_implements_are_served(digits_dir):
    proc = run_legacy(os.path.join(FIXTURES, "uses_contrib.py"), digits_dir, timeout=150)
    assert proc.returncode == 0, explain(proc)
    out = proc.stdout
    assert "datasets 2485 (300, 10)" in out and "lookup [2, 0, 3] [b'one']" in out, explain(proc)
    assert "variables ['extra/w']" in out and "global_step 200" in out, explain(proc)
    accuracy = float(out.strip().splitlines()[-1].split()[-1])
    assert accuracy > 0.8, explain(proc)  # 0.957 here: the tutorial's model and contrib's layers trained


def test_missing_mnist_ends_the_script_with_one_line_not_a_hang(tmp_path):
    proc = run_legacy(os.path.join(FIXTURES, "reads_mnist.py"), str(tmp_path))
    assert proc.returncode == 2, explain(proc)
    assert "has no train-images-idx3-ubyte.gz" in proc.stderr.strip().splitlines()[-1]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "usage: run_legacy.py SCRIPT.py [SCRIPT ARGS...] or run_legacy.py -m MODULE [ARGS...]"),
        (("nowhere.py",), "script nowhere.py does not exist"),
    ],
)
def test_run_legacy_bad_usage_is_one_line_and_status_2(args, message):
    proc = run_legacy(*args)
    assert proc.returncode == 2 and proc.stderr == f"run_legacy.py: error: {message}\n", explain(proc)


def test_replica_sessions_get_device_filters_unless_the_script_set_some():
    import tensorflow as tf

    from ps_toolkit_compat import task_context

    try:
        task_context.set_task("worker", 1)
        original = tf.compat.v1.ConfigProto(allow_soft_placement=True)
        filled = task_context.filled_config(original)
        assert list(filled.device_filters) == ["/job:ps", "/job:worker/task:1"] and filled.allow_soft_placement
        assert not original.device_filters  # the script's config is left alone
        own = tf.compat.v1.ConfigProto(device_filters=["/job:worker"])
        assert task_context.filled_config(own) is own
        task_context.set_task("ps", 0)
        assert task_context.filled_config(None) is None
    finally:
        task_context.set_task(None, None)


def test_a_sessions_filters_include_every_task_its_graph_pins_ops_on():
    """Never stricter than TF 1.x: a master whose graph sits on /job:worker (replica_device_setter's default)
    still sees the workers; a graph pinned on the ps and the task itself gets only those; an empty graph none."""
    import tensorflow as tf

    from ps_toolkit_compat import task_context

    v1 = tf.compat.v1
    cluster = {"ps": ["h:1"], "master": ["h:2"], "worker": ["h:3", "h:4"]}
    try:
        task_context.set_task("master", 0)
        setter = v1.train.replica_device_setter(cluster=cluster)
        with tf.Graph().as_default() as default_worker, default_worker.device(setter):
            v1.get_variable("weights", [1]) * 2.0
        filters = task_context.filled_config(None, default_worker).device_filters
        assert list(filters) == ["/job:ps", "/job:master/task:0", "/job:worker"]
        with tf.Graph().as_default() as pinned:
            with tf.device("/job:worker/replica:0/task:1/device:CPU:0"):
                tf.constant(1.0)
            with tf.device("/job:master/task:0"), tf.device("/device:CPU:0"):
                tf.constant(2.0)
        assert list(task_context.filled_config(None, pinned).device_filters)[-1] == "/job:worker/task:1"
        with tf.Graph().as_default() as own_only, tf.device("/job:master/task:0"):
            tf.constant(1.0)
        assert list(task_context.filled_config(None, own_only).device_filters) == ["/job:ps", "/job:master/task:0"]
        assert task_context.filled_config(None, tf.Graph()) is None
    finally:
        task_context.set_task(None, None)


def test_a_server_sharing_its_host_does_not_spin_and_one_alone_keeps_the_scripts_config():
    import tensorflow as tf

    from ps_toolkit_compat import task_context

    shared = {"ps": ["localhost:2222"], "worker": ["127.0.0.1:2223", "other-host:2224"]}
    original = tf.compat.v1.ConfigProto(allow_soft_placement=True)
    config = task_context.server_config(original, tf.train.ClusterSpec(shared), "ps", 0)
    assert config.experimental.disable_thread_spinning and config.allow_soft_placement
    assert not original.experimental.disable_thread_spinning  # the script's config is left alone
    server_def = tf.train.ServerDef(cluster=tf.train.ClusterSpec(shared).as_cluster_def(), job_name="ps")
    assert task_context.server_config(None, server_def, "ps", 0).experimental.disable_thread_spinning
    # worker 1 is alone on its host; a cluster TensorFlow will refuse is left to TensorFlow.
    assert task_context.server_config(original, shared, "worker", 1) is original
    assert task_context.server_config(None, shared, "worker", 1) is None
    assert task_context.server_config(None, {"ps": ["no port"]}, "ps", 0) is None


def test_the_servers_task_is_what_tensorflow_infers_when_the_script_leaves_it_out():
    from ps_toolkit_compat import task_context

    one_job = {"local": ["localhost:2222", "localhost:2223"]}
    assert task_context.task_of_server(one_job, None, 1) == ("local", 1)
    sparse = {"ps": {3: "localhost:2225"}, "worker": ["localhost:2226"]}
    assert task_context.task_of_server(sparse, "ps", None) == ("ps", 3)
    assert task_context.server_config(None, sparse, "ps", 3).experimental.disable_thread_spinning
    # Ambiguous: TensorFlow refuses it, and nothing is guessed here.
    assert task_context.task_of_server(sparse, None, None) == (None, None)
    assert task_context.server_config(None, sparse, None, None) is None


def test_a_non_chief_waits_through_the_session_manager_the_script_sees(monkeypatch):
    """Never stricter: TF's worker session creator used tf.train.SessionManager, so a script's (or a test's)
    patch of it decides how a non-chief waits (estimator_test.py mocks wait_for_session)."""
    import tensorflow as tf

    from ps_toolkit_compat import supervision

    v1 = tf.compat.v1
    masters = []
    graph = tf.Graph()
    with graph.as_default():
        step = v1.train.get_or_create_global_step()
        initialize = v1.global_variables_initializer()

    def initialized(self, master, config=None, max_wait_secs=None):
        masters.append(master)
        session = v1.Session(master, graph=graph, config=config)
        session.run(initialize)
        return session

    monkeypatch.setattr(supervision.SessionManager, "wait_for_session", initialized)
    with graph.as_default(), supervision.MonitoredTrainingSession(is_chief=False, max_wait_secs=5) as session:
        assert session.run(step) == 0
    assert masters == [""]
