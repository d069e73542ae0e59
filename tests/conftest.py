"""Shared test fixtures: local clusters. The set-up every test needs is in the root conftest.py."""

# Local clusters (ps_toolkit.launch.local_cluster); TensorFlow is imported only by tests that use them.
import pytest


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


@pytest.fixture
def own_fork_server(monkeypatch):
    """Launches in this test start a fork server of their own, not the session's host server."""
    from ps_toolkit.process import fork_client

    monkeypatch.delenv(fork_client.HOST_SERVER_ENV, raising=False)
