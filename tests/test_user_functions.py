"""A user's function named by a flag fails as the user's input: one line naming the flag, exit 2, no traceback.

Backends (--backend=MODULE:FUNCTION), cluster sources (--cluster_from=MODULE:FUNCTION) and placement
strategies (--placement=MODULE:FUNCTION) are the user's code: what they raise at import or when called, and a
result of the wrong kind, is reported as theirs, with the line of their file.
"""

import os
import subprocess
import sys

import pytest

from ps_toolkit.base.errors import ConfigError
from ps_toolkit.cluster.config import ClusterConfig
from ps_toolkit.placement.strategies import device_setter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BOUND_SECS = 60
USER_MODULE = """\
def returns_text(*args):
    return "nope"


def returns_nothing(*args):
    return None


def raises(*args):
    raise RuntimeError("boom in the user's code")


def returns_a_number(num_ps, seed):
    return 42
"""


@pytest.fixture
def user_dir(tmp_path):
    (tmp_path / "user_functions.py").write_text(USER_MODULE)
    (tmp_path / "fails_on_import.py").write_text('raise RuntimeError("cannot import me")\n')
    return tmp_path


def _run(script: str, args: list[str], user_dir) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(user_dir))
    argv = [sys.executable, os.path.join(ROOT, "scripts", script), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=BOUND_SECS, env=env, cwd=user_dir)


@pytest.mark.parametrize(
    "backend, expected",
    [
        ("user_functions:returns_text", "--backend=user_functions:returns_text: returned 'nope', not a RunResult"),
        ("user_functions:returns_nothing", "--backend=user_functions:returns_nothing: returned None"),
        ("user_functions:raises", "--backend=user_functions:raises: raised RuntimeError: boom in the user's code at"),
        ("fails_on_import:f", "--backend=fails_on_import:f: importing 'fails_on_import' raised RuntimeError"),
    ],
)
def test_a_users_backend_that_fails_is_one_line_and_status_2(user_dir, backend, expected):
    args = [f"--backend={backend}", "--isolation=none", "--nochart", f"--log_dir={user_dir / 'run'}"]
    done = _run("launch_local.py", args, user_dir)
    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr, done.stderr
    assert expected in done.stderr.strip().splitlines()[-1], done.stderr


@pytest.mark.parametrize(
    "source, expected",
    [
        ("user_functions:returns_nothing", "returned NoneType, not a ClusterConfig"),
        ("user_functions:raises", "raised RuntimeError: boom in the user's code at"),
        ("fails_on_import:f", "importing 'fails_on_import' raised RuntimeError: cannot import me at"),
    ],
)
def test_a_users_cluster_source_that_fails_is_one_line_and_status_2(user_dir, source, expected):
    done = _run("run_task.py", [f"--cluster_from={source}", "--train_steps=1"], user_dir)
    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr, done.stderr
    assert expected in done.stderr.strip().splitlines()[-1], done.stderr


def _cluster() -> ClusterConfig:
    return ClusterConfig.from_host_flags(
        ps_hosts="localhost:1", worker_hosts="localhost:2", job_name="worker", task_index=0
    )


def _returns_a_number(num_ps, seed):
    return 42


def _raises(num_ps, seed):
    raise RuntimeError("no strategy today")


@pytest.mark.parametrize(
    "strategy, expected",
    [(_returns_a_number, "returned int, not a ps_strategy"), (_raises, "raised RuntimeError: no strategy today")],
)
def test_a_placement_strategy_that_fails_is_a_config_error_naming_it(strategy, expected):
    with pytest.raises(ConfigError, match=expected) as failed:
        device_setter(_cluster(), strategy)
    assert f"--placement={__name__}:{strategy.__name__}" in str(failed.value)


def test_a_tf_config_entry_holding_two_addresses_is_refused_naming_it():
    tf_config = '{"cluster": {"worker": ["a:1,b:2"]}, "task": {"type": "worker", "index": 0}}'
    with pytest.raises(ConfigError, match=r"cluster.worker\[0\] is 'a:1,b:2': one host:port per entry"):
        ClusterConfig.from_tf_config(tf_config)


def test_ctrl_c_while_a_users_function_runs_is_one_line_and_status_130(capsys):
    from ps_toolkit.base import user_calls

    def interrupted_by_the_user():
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as ended:
        user_calls.call(interrupted_by_the_user, "--backend=m:f")
    assert ended.value.code == 130
    assert capsys.readouterr().err.strip().endswith(": interrupted (Ctrl-C) while --backend=m:f ran")
