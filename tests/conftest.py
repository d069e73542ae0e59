"""Shared test set-up: absl flags parsed, TensorFlow quiet, markers registered."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The legacy Keras, as the toolkit's scripts choose it: tf.compat.v1.layers needs it.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

from absl import flags  # noqa: E402

from ps_toolkit.task import port_guard  # noqa: E402

# Standalone tasks guard their ports with packet-filter rules (ps_toolkit/task/port_guard.py) or
# refuse to start. Where no rules can be installed (not root), the tests' own loopback
# clusters run with their ports open; tests/test_open_ports.py checks the refusal itself.
if port_guard.unavailable_reason():
    os.environ.setdefault(port_guard.ALLOW_OPEN_PORTS_ENV, "1")


def pytest_configure(config):
    # absl-based code reads flags; under pytest nothing parses them.
    flags.FLAGS.mark_as_parsed()


# Local clusters (ps_toolkit.launch.local_cluster); TensorFlow is imported only by tests that use them.
import pytest  # noqa: E402


@pytest.fixture(scope="session")
def in_process_cluster():
    """1 ps + 2 workers as tf.compat.v1.train.Server objects in this process, shared by the session.

    gRPC servers cannot be shut down in-process, so one cluster serves every test:
    use distinct variable names per test. ``.targets['worker'][0]``, ``.cluster_spec``.
    """
    from ps_toolkit.launch.local_cluster import InProcessCluster

    cluster = InProcessCluster(num_ps=1, num_workers=2).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def local_cluster(tmp_path):
    """Starts LocalCluster(**kwargs) (real processes); every one is stopped after the test.

    Example: ``cluster = local_cluster(num_ps=1, num_workers=2, train_args=["--train_steps=50"])``.
    """
    from ps_toolkit.launch.local_cluster import LocalCluster

    started = []

    def start(**kwargs):
        kwargs.setdefault("log_dir", str(tmp_path / f"cluster{len(started)}"))
        cluster = LocalCluster(**kwargs)
        started.append(cluster)
        return cluster.start()

    yield start
    for cluster in started:
        cluster.stop()
