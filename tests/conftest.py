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
def de():
    """TFRA's ``dynamic_embedding`` module as the compat layer serves it in this process, for one test."""
    from ps_toolkit_compat.tfra import install

    install.install()
    try:
        from tensorflow_recommenders_addons import dynamic_embedding

        yield dynamic_embedding
    finally:
        install.uninstall()


@pytest.fixture
def own_fork_server(monkeypatch):
    """Launches in this test start a fork server of their own, not the session's host server."""
    from ps_toolkit.process import fork_client

    monkeypatch.delenv(fork_client.HOST_SERVER_ENV, raising=False)


def _benchmark_flag_modules() -> list:
    """The benchmark modules whose absl flags this test process holds.

    Test files share a worker process (--dist loadfile) and absl's global FLAGS: a benchmark
    module's flags (a required --out, a second --repetitions) break the flag parsing of every
    test file that runs after it there, far from the import that caused it.
    """
    from absl import flags

    return sorted(m for m in flags.FLAGS.flags_by_module_dict() if m.startswith("benchmarks."))


def _refuse_benchmark_flags(where: str) -> None:
    leaking = _benchmark_flag_modules()
    if leaking:
        raise pytest.UsageError(
            f"{where} imported {', '.join(leaking)}, which define absl flags for the whole test process: "
            "import the flagless module the test needs instead"
        )


def pytest_collection_finish(session):
    """Collecting the tests imports no benchmark's command-line module."""
    _refuse_benchmark_flags("collecting the tests")


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item):
    """Nor does a test itself (an import inside its body)."""
    _refuse_benchmark_flags(item.nodeid)
