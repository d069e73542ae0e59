"""Set-up shared by tests/ and examples/: absl flags parsed, TensorFlow quiet, open ports allowed where unguardable.

At the repository root so that it applies to both test folders; tests/conftest.py holds the fixtures.
"""

import collections
import os
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The legacy Keras, as the toolkit's scripts choose it: tf.compat.v1.layers needs it.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

from absl import flags  # noqa: E402

from ps_toolkit.launch import task_plan  # noqa: E402
from ps_toolkit.network import port_guard  # noqa: E402
from ps_toolkit.process import fork_client  # noqa: E402

# Standalone tasks keep their ports private (ps_toolkit/task/startup.py): a loopback cluster in a
# network namespace of its own, others behind packet-filter rules, or they refuse to start. The
# tests' own clusters run with their ports open on this machine, as every user and machine allows,
# so that a test can reach its tasks; tests/test_open_ports.py and tests/test_task_startup.py
# check the defaults, without this variable.
os.environ.setdefault(port_guard.ALLOW_OPEN_PORTS_ENV, "1")


HERE = Path(os.path.realpath(__file__)).parent
# The port guards' rules when the session started: it must leave the INPUT chain as it found it.
_RULES_AT_START = pytest.StashKey[dict]()

# The files that take longest (30 s and more of one worker's time in a full run), started first
# in this order: the workers then end together, not one running a long file alone while the
# others wait. The rest follow, most tests first. docs/performance.md has the measurements.
LONGEST_FIRST = (
    "tests/test_spark_cluster.py",
    "tests/test_ray_cluster.py",
    "tests/test_user_model_cluster.py",
    "tests/test_open_ports.py",
    "tests/test_failure_matrix.py",
    "tests/test_netns.py",
    "tests/test_benchmark_slow.py",
    "tests/test_sync_ps_restart.py",
    "tests/test_fork_server.py",
    "tests/test_compat_seed.py",
    "tests/test_estimator_cluster.py",
    "tests/test_run_task.py",
    "tests/test_launcher_slow.py",
    "tests/test_wheel_install.py",
    "tests/test_partition.py",
    "tests/test_launcher.py",
    "examples/wide_deep/test_wide_deep.py",
    "tests/test_slurm_cluster.py",
    "examples/digits_cnn/test_digits_cnn.py",
    "tests/test_launcher_fork.py",
    "tests/test_task_startup.py",
    "tests/test_bad_input.py",
    "tests/test_sync_arithmetic.py",
    "tests/test_embedding_bytes.py",
    "examples/taxifare_train_and_evaluate/test_taxifare_train_and_evaluate.py",
)


def _guard_rules() -> dict[str, str | None]:
    """Every port guard's packet-filter rule in this namespace now, with its owner id (none where no rules can
    be installed)."""
    if port_guard.unavailable_reason():
        return {}
    rules = {}
    for tool in port_guard.tools():
        rules.update((f"{tool} {' '.join(spec)}", owner) for spec, _, owner in port_guard.guard_rules(tool))
    return rules


def pytest_configure(config):
    # absl-based code reads flags; under pytest nothing parses them.
    flags.FLAGS.mark_as_parsed()
    if not hasattr(config, "workerinput"):  # the session's own process (xdist's controller), not a worker
        config.stash[_RULES_AT_START] = _guard_rules()
    missing = [path for path in LONGEST_FIRST if not (HERE / path).is_file()]
    if missing:
        raise pytest.UsageError(f"conftest.py LONGEST_FIRST names files that do not exist: {', '.join(missing)}")


def pytest_sessionfinish(session, exitstatus):
    """Every test process removes its AutoGraph files; the session's own process also checks the INPUT chain."""
    _remove_autograph_files()
    _fail_on_left_guard_rules(session)


def _remove_autograph_files():
    """The files AutoGraph wrote for this test process's own converted functions, with their compiled
    form in $TMPDIR/__pycache__ (AutoGraph's exit hook removes only the sources): the suite leaves none."""
    from ps_toolkit.base import tf_internals

    tf_internals.remove_autograph_files()


def pytest_collection_modifyitems(items):
    """Orders the files as LONGEST_FIRST says (xdist sends them in this order: --no-loadscope-reorder),
    each file's tests in their own order."""
    rank = {path: position for position, path in enumerate(LONGEST_FIRST)}
    files = [Path(os.path.relpath(os.path.realpath(item.path), HERE)).as_posix() for item in items]
    tests_per_file = collections.Counter(files)

    def key(pair):
        path = pair[1]
        return rank.get(path, len(rank)), -tests_per_file[path], path

    # sorted() is stable: each file's tests keep their order.
    items[:] = [item for item, _ in sorted(zip(items, files, strict=True), key=key)]
    if os.geteuid() != 0:  # CI runs them as root (.ci/run); a user sees why they were skipped
        for item in items:
            for mark in item.iter_markers("root"):
                why = mark.args[0] if mark.args else "it needs root"
                item.add_marker(pytest.mark.skip(reason=f"not root: {why}"))


@pytest.fixture(scope="session", autouse=True)
def host_fork_server(tmp_path_factory):
    """One fork server for the whole session: every launch and cluster helper forks its tasks from
    it (PS_TOOLKIT_FORK_SERVER) instead of importing TensorFlow again. Tests of a launch's own
    server remove the variable."""
    folder = tmp_path_factory.mktemp("fork_server")
    os.chmod(folder, 0o700)
    path = str(folder / "server.sock")
    # Imported under the tasks' environment (what launch_local.py gives them), so that launches match it.
    process = fork_client.start_host_server(path, task_plan.task_env())
    os.environ[fork_client.HOST_SERVER_ENV] = path
    yield path
    os.environ.pop(fork_client.HOST_SERVER_ENV, None)
    fork_client.stop_host_server(process)


def _fail_on_left_guard_rules(session):
    """Fails the session if its tests left port-guard rules behind (checked once every worker has ended).

    A rule whose guardian no longer runs was left; one whose guardian runs may be another session's on a
    shared machine (said, not failed); rules without an owner id are older versions', not this code's.
    """
    if hasattr(session.config, "workerinput") or _RULES_AT_START not in session.config.stash:
        return
    before = session.config.stash[_RULES_AT_START]
    new = {rule: owner for rule, owner in _guard_rules().items() if rule not in before and owner}
    left = sorted(rule for rule, owner in new.items() if port_guard.owner_id(int(owner.split(".")[0])) != owner)
    running = sorted(rule for rule in new if rule not in left)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if running and reporter is not None:
        reporter.write_line(f"port-guard rules of running guardians (another session's?): {running}", yellow=True)
    if left:
        if reporter is not None:
            lines = [f"the tests left {len(left)} port-guard rule(s) of dead guardians in the INPUT chain:", *left]
            reporter.write_line("\n".join(lines), red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
