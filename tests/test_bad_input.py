"""Bad input through scripts/run_task.py: one line naming the value and its source, exit 2, no traceback."""

import atexit
import contextlib
import gzip
import json
import os
import shutil
import socket
import subprocess

import pytest

from ps_toolkit.launch.ports import reserve_ports
from ps_toolkit.models.mnist_files import EMBEDDED_DIGITS_DIR
from tests.taskrun import REPO, RUN_TASK, python_command, run_tasks

LAUNCH_LOCAL = os.path.join(REPO, "scripts", "launch_local.py")

# Free ports any user may serve, held for this module's tests: a task that gets past its flags checks
# its own port before it fails on the input under test (ports 1-3 would need root).
_RESERVATION = reserve_ports(3)
atexit.register(_RESERVATION.release)
_PORTS = _RESERVATION.ports
OK_HOSTS = [f"--ps_hosts=localhost:{_PORTS[0]}", f"--worker_hosts=localhost:{_PORTS[1]},localhost:{_PORTS[2]}"]

CASES = {
    "task index not a number": (OK_HOSTS + ["--job_name=ps", "--task_index=abc"], {}, "task_index"),
    "unknown flag": (OK_HOSTS + ["--job_name=ps", "--nonsense=1"], {}, "nonsense"),
    "unknown job": (OK_HOSTS + ["--job_name=boss"], {}, "unknown job 'boss' from --job_name"),
    "ps memory not a number": (
        OK_HOSTS + ["--job_name=ps"],
        {"PS_TOOLKIT_PS_MEMORY_MB": "lots"},
        "PS_TOOLKIT_PS_MEMORY_MB='lots': must be a whole number of MB",
    ),
    "index out of range": (OK_HOSTS + ["--job_name=worker", "--task_index=7"], {}, "task index 7 from flags"),
    "negative index": (OK_HOSTS + ["--job_name=worker", "--task_index=-1"], {}, "task index -1"),
    "host without port": (["--ps_hosts=localhost", "--worker_hosts=localhost:2", "--job_name=ps"], {}, "'localhost'"),
    "port zero": (["--ps_hosts=localhost:0", "--worker_hosts=localhost:2", "--job_name=ps"], {}, "port 0"),
    "port too large": (["--ps_hosts=h:65536", "--worker_hosts=h:2", "--job_name=ps"], {}, "port 65536"),
    "duplicate address": (["--ps_hosts=h:2", "--worker_hosts=h:2", "--job_name=ps"], {}, "h:2"),
    "empty worker list": (["--ps_hosts=h:1", "--worker_hosts=", "--job_name=ps"], {}, "--worker_hosts"),
    "tf_config not json": (["--job_name=ps"], {"TF_CONFIG": "{oops"}, "TF_CONFIG is not valid JSON"),
    "tf_config without task": ([], {"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1"]}})}, "no 'task'"),
    "tf_config string index": (
        [],
        {"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": "0"}})},
        "task index '0'",
    ),
    "flags disagree with tf_config": (
        ["--job_name=ps"],
        {"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1"], "ps": ["b:1"]}, "task": {"type": "worker"}})},
        "--job_name=ps disagrees with TF_CONFIG",
    ),
    "aggregate more than replicas": (
        OK_HOSTS + ["--job_name=worker", "--sync_replicas", "--replicas_to_aggregate=3"],
        {},
        "--replicas_to_aggregate=3",
    ),
    "aggregate without sync": (
        OK_HOSTS + ["--job_name=worker", "--replicas_to_aggregate=2"],
        {},
        "needs --sync_replicas",
    ),
    # 0 trains until stopped; a negative count is refused.
    "negative train steps": (OK_HOSTS + ["--job_name=worker", "--train_steps=-1"], {}, "--train_steps=-1"),
    "no step limit with sync": (
        OK_HOSTS + ["--job_name=worker", "--train_steps=0", "--sync_replicas"],
        {},
        "--train_steps=0 (train until stopped) works with asynchronous training only",
    ),
    # 0 is a value, and a wrong one, not "the default".
    "zero steps per run": (OK_HOSTS + ["--job_name=worker", "--steps_per_run=0"], {}, "--steps_per_run=0"),
    "negative learning rate": (OK_HOSTS + ["--job_name=worker", "--learning_rate=-1"], {}, "--learning_rate=-1"),
    "unknown model": (OK_HOSTS + ["--job_name=worker", "--model=resnet"], {}, "resnet"),
    "unknown placement": (OK_HOSTS + ["--job_name=worker", "--placement=magic"], {}, "magic"),
    "near weights with partitions": (
        OK_HOSTS + ["--job_name=worker", "--compute_near_weights=all", "--partition_variables"],
        {},
        "--compute_near_weights=all",
    ),
    "unknown near-weights mode": (OK_HOSTS + ["--job_name=worker", "--compute_near_weights=maybe"], {}, "maybe"),
    "replicas without a ps": (
        ["--worker_hosts=localhost:2,localhost:3", "--job_name=worker"],
        {},
        "no ps task for 2 training replicas",
    ),
    "stray argument": (OK_HOSTS + ["--job_name=ps", "extra"], {}, "'extra'"),
    "missing cluster file": (["--cluster_file=/nonexistent/c.json", "--job_name=ps"], {}, "/nonexistent/c.json"),
    # Environment errors and out-of-range values: one line, the documented status.
    "empty host label": (["--ps_hosts=a..b:1", "--worker_hosts=h:2", "--job_name=ps"], {}, "'a..b': an empty label"),
    "host label over 63": (
        [f"--ps_hosts={'x' * 64}.example:1", "--worker_hosts=h:2", "--job_name=ps"],
        {},
        "has 64 characters, more than 63",
    ),
    "superscript port": (["--ps_hosts=h:²²²", "--worker_hosts=h:2", "--job_name=ps"], {}, "bad port"),
    "fullwidth port": (["--ps_hosts=h:２６２３", "--worker_hosts=h:2", "--job_name=ps"], {}, "bad port"),
    "train steps beyond int64": (
        OK_HOSTS + ["--job_name=worker", f"--train_steps={2**63}"],
        {},
        f"--train_steps={2**63}",
    ),
    "train steps that overflow": (
        OK_HOSTS + ["--job_name=worker", f"--train_steps={2**63 - 1}"],
        {},
        "the global step is an int64",
    ),
    "checkpoint secs nan": (
        OK_HOSTS + ["--job_name=worker", "--save_checkpoint_secs=nan"],
        {},
        "--save_checkpoint_secs=nan",
    ),
    "checkpoint secs negative": (
        OK_HOSTS + ["--job_name=worker", "--save_checkpoint_secs=-1"],
        {},
        "--save_checkpoint_secs=-1",
    ),
    "delta secs nan": (
        OK_HOSTS + ["--job_name=worker", "--delta_checkpoint_secs=nan"],
        {},
        "--delta_checkpoint_secs=nan",
    ),
    "delta steps zero": (
        OK_HOSTS + ["--job_name=worker", "--delta_checkpoint_steps=0"],
        {},
        "--delta_checkpoint_steps=0 must be positive",
    ),
    "watchdog nan": (OK_HOSTS + ["--job_name=worker", "--watchdog_secs=nan"], {}, "--watchdog_secs=nan"),
    "watchdog negative": (OK_HOSTS + ["--job_name=worker", "--watchdog_secs=-5"], {}, "--watchdog_secs=-5"),
    "readiness poll inf": (
        OK_HOSTS + ["--job_name=worker", "--readiness_poll_secs=inf"],
        {},
        "--readiness_poll_secs=inf",
    ),
    "learning rate nan": (OK_HOSTS + ["--job_name=worker", "--learning_rate=nan"], {}, "--learning_rate=nan"),
    "orphan timeout nan": (
        OK_HOSTS + ["--job_name=ps", "--ps_orphan_timeout_secs=nan"],
        {},
        "--ps_orphan_timeout_secs",
    ),
    "negative seed": (OK_HOSTS + ["--job_name=worker", "--seed=-3"], {}, "--seed=-3"),
}


def assert_clean_failure(outcome, expected_text, exit_code=2):
    detail = outcome.describe()
    assert outcome.returncode == exit_code, detail
    assert "Traceback" not in outcome.stderr, detail
    error_lines = [line for line in outcome.stderr.splitlines() if "run_task.py: error: " in line]
    assert len(error_lines) == 1, detail
    assert expected_text in error_lines[0], detail


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_line_and_exit_2(case, tmp_path):
    args, env, expected = CASES[case]
    args = args + [f"--checkpoint_dir={tmp_path}/ckpt"]
    outcome = run_tasks({case: python_command(RUN_TASK, *args)}, timeout=60, env=env)[case]
    assert_clean_failure(outcome, expected)
    # Nothing touched: a rejected task never creates its checkpoint dir.
    assert not os.path.exists(tmp_path / "ckpt"), outcome.describe()


def test_port_already_in_use_is_caught_before_tensorflow(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = [f"--ps_hosts=localhost:{port}", "--worker_hosts=localhost:2", "--job_name=ps"]
        outcome = run_tasks({"ps": python_command(RUN_TASK, *args)}, timeout=60)["ps"]
    assert_clean_failure(outcome, f"port {port}", exit_code=4)


def test_a_privileged_port_without_privileges_is_a_permanent_error(tmp_path):
    """Port 1 as a user who may not serve it: exit 2 (no retry will get it), not "in use" (exit 4)."""
    if os.geteuid() == 0:
        pytest.skip("root may serve any port")
    args = ["--ps_hosts=localhost:1", "--worker_hosts=localhost:2", "--job_name=ps", f"--checkpoint_dir={tmp_path}/c"]
    outcome = run_tasks({"ps": python_command(RUN_TASK, *args)}, timeout=60)["ps"]
    assert_clean_failure(outcome, "port 1 of /job:ps/task:0 (localhost:1, from flags) needs privileges", exit_code=2)


def test_missing_data_dir(tmp_path):
    args = OK_HOSTS + ["--job_name=worker", f"--data_dir={tmp_path}/nope", f"--checkpoint_dir={tmp_path}/c"]
    outcome = run_tasks({"w": python_command(RUN_TASK, *args)}, timeout=60)["w"]
    assert_clean_failure(outcome, f"{tmp_path}/nope")


def test_unresolvable_host(tmp_path):
    args = ["--ps_hosts=no-such-host.invalid:2222", "--worker_hosts=localhost:2", "--job_name=ps"]
    outcome = run_tasks({"ps": python_command(RUN_TASK, *args)}, timeout=60)["ps"]
    assert_clean_failure(outcome, "no-such-host.invalid")


def make_idx_dir(tmp_path, damage):
    """A copy of the embedded digits' IDX files with one file damaged."""
    data = tmp_path / "data"
    shutil.copytree(EMBEDDED_DIGITS_DIR, data)
    path = data / "train-images-idx3-ubyte.gz"
    raw = gzip.decompress(path.read_bytes())
    raw = raw[:-500] if damage == "truncated" else b"\x00\x00\x08\x07" + raw[4:]
    path.write_bytes(gzip.compress(raw))
    return data, path


@pytest.mark.parametrize(
    "damage, expected",
    [("truncated", "is truncated or padded"), ("magic", "has magic number 0x00000807")],
)
def test_damaged_idx_file(tmp_path, damage, expected):
    data, path = make_idx_dir(tmp_path, damage)
    args = OK_HOSTS + ["--job_name=worker", f"--data_dir={data}", f"--checkpoint_dir={tmp_path}/c"]
    outcome = run_tasks({"w": python_command(RUN_TASK, *args)}, timeout=90)["w"]
    assert_clean_failure(outcome, expected)
    assert str(path) in outcome.stderr


def test_corrupted_checkpoints_are_refused_and_left_untouched(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "model.ckpt-100.index").write_bytes(b"not an index")
    (ckpt / "model.ckpt-100.data-00000-of-00001").write_bytes(b"\x01" * 64)
    (ckpt / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-100"\n')
    before = {p.name: p.read_bytes() for p in ckpt.iterdir()}
    args = OK_HOSTS + ["--job_name=worker", "--task_index=0", f"--checkpoint_dir={ckpt}"]
    outcome = run_tasks({"chief": python_command(RUN_TASK, *args)}, timeout=90)["chief"]
    assert_clean_failure(outcome, "holds checkpoints but none is readable")
    assert {p.name: p.read_bytes() for p in ckpt.iterdir()} == before


def test_missing_data_dir_is_reported_before_tensorflow_is_imported(tmp_path):
    # A "tensorflow" that cannot be imported: the right error line proves the check came first.
    fake = tmp_path / "fake_site" / "tensorflow"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('tensorflow was imported')\n")
    env = {"PYTHONPATH": f"{tmp_path / 'fake_site'}{os.pathsep}{REPO}"}
    args = OK_HOSTS + ["--job_name=worker", f"--data_dir={tmp_path}/nope", f"--checkpoint_dir={tmp_path}/c"]
    outcome = run_tasks({"w": python_command(RUN_TASK, *args)}, timeout=60, env=env)["w"]
    assert_clean_failure(outcome, f"data dir {tmp_path}/nope (from --data_dir) does not exist")


LAUNCH_CASES = {
    "no ps for two replicas": (["--num_ps=0"], "no ps task for 2 training replicas (from --num_ps=0)"),
    "no ps, explicit hosts": (
        ["--worker_hosts=localhost:2,localhost:3"],
        "no ps task for 2 training replicas (from --ps_hosts)",
    ),
    "aggregate more than workers": (
        ["--sync_replicas", "--replicas_to_aggregate=3"],
        "--replicas_to_aggregate=3 must be between 1 and the number of training replicas, 2",
    ),
    "negative train steps": (["--train_steps=-1"], "--train_steps=-1 must be positive, or 0 to train until stopped"),
    "missing data dir": (["--data_dir=/nonexistent/mnist"], "data dir /nonexistent/mnist (from --data_dir)"),
    "unknown placement": (["--placement=magic"], "magic"),
}


@pytest.mark.parametrize("case", sorted(LAUNCH_CASES))
def test_launch_local_refuses_a_cluster_that_cannot_train_before_anything_starts(case, tmp_path):
    args, expected = LAUNCH_CASES[case]
    env = {"TMPDIR": str(tmp_path)}
    outcome = run_tasks({case: python_command(LAUNCH_LOCAL, "--isolation=none", *args)}, timeout=60, env=env)[case]
    detail = outcome.describe()
    assert outcome.returncode == 2, detail
    assert "Traceback" not in outcome.stderr, detail
    lines = [line for line in outcome.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and expected in lines[0], detail
    # Nothing started: no run folder, no port lock, no task line.
    assert list(tmp_path.iterdir()) == [], detail
    assert "launcher: cluster" not in outcome.stdout, detail


def test_single_replica_without_a_ps_is_accepted(tmp_path):
    # The topology check refuses only what cannot train: one replica trains alone.
    from ps_toolkit.cluster import preflight
    from ps_toolkit.cluster.config import ClusterConfig

    cluster = ClusterConfig.from_host_flags(ps_hosts=None, worker_hosts="localhost:2", job_name="worker", task_index=0)
    preflight.check_topology(cluster)


@pytest.mark.root("a folder owned by another user is planted with chown")
def test_a_default_state_folder_planted_by_another_user_is_refused(tmp_path):
    planted = tmp_path / f"ps_toolkit-{os.getuid()}"
    planted.mkdir(mode=0o700)
    os.chown(planted, 65534, 65534)
    args = OK_HOSTS + ["--job_name=worker", "--task_index=0"]  # no --checkpoint_dir: the default one
    outcome = run_tasks({"w": python_command(RUN_TASK, *args)}, timeout=60, env={"TMPDIR": str(tmp_path)})["w"]
    assert_clean_failure(outcome, f"refusing {planted}: it is owned by uid 65534, not by you")
    assert list(planted.iterdir()) == []


def test_a_symlink_planted_as_flags_json_is_refused_and_its_target_untouched(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("root-only secret")
    os.chmod(victim, 0o600)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    os.symlink(victim, ckpt / "flags.json")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = [f"--worker_hosts=localhost:{port}", "--job_name=worker", f"--checkpoint_dir={ckpt}", "--train_steps=5"]
    outcome = run_tasks({"chief": python_command(RUN_TASK, *args)}, timeout=120)["chief"]
    assert_clean_failure(outcome, f"refusing to write {ckpt}/flags.json: it is a symbolic link")
    assert victim.read_text() == "root-only secret"


# --model_fn and friends: the user's module is found on PYTHONPATH (tests/user_models/clicks.py).
USER_MODELS = {"PYTHONPATH": os.path.join(os.path.dirname(os.path.abspath(__file__)), "user_models")}
CLICKS = ["--input_fn=clicks:input_fn"]
MODEL_FN_CASES = {
    "no such module": (["--model_fn=nosuch:model_fn"] + CLICKS, "no module named 'nosuch'"),
    "no such function": (["--model_fn=clicks:nope"] + CLICKS, "defines no 'nope'"),
    "not module:function": (["--model_fn=clicks"] + CLICKS, "--model_fn='clicks' is not MODULE:FUNCTION"),
    "model_fn without input_fn": (["--model_fn=clicks:model_fn"], "needs --input_fn"),
    "input_fn without model_fn": (CLICKS, "--input_fn needs --model_fn"),
    "model and model_fn": (["--model=mlp", "--model_fn=clicks:model_fn"] + CLICKS, "give one"),
    "params not json": (["--model_fn=clicks:model_fn", "--params={vocab: 1}"] + CLICKS, "--params='{vocab: 1}' is not"),
    "params not an object": (["--model_fn=clicks:model_fn", "--params=[1]"] + CLICKS, "must be a JSON object"),
    "unknown optimizer": (["--optimizer=lbfgs"], "--optimizer"),
    "no loss in train mode": (
        ["--model_fn=clicks:model_fn_without_loss"] + CLICKS,
        "clicks:model_fn_without_loss returned no loss in TRAIN mode",
    ),
    "dataset without labels": (
        ["--model_fn=clicks:model_fn", "--input_fn=clicks:input_fn_without_labels"],
        "clicks:input_fn_without_labels yields {'ids'",
    ),
}


@pytest.mark.parametrize("case", sorted(MODEL_FN_CASES))
def test_bad_model_fn_input_is_one_line_and_exit_2(case, tmp_path):
    """Reported before this task's server starts: the chief (worker 0) never creates its checkpoint dir."""
    args, expected = MODEL_FN_CASES[case]
    args = OK_HOSTS + ["--job_name=worker", "--task_index=0", f"--checkpoint_dir={tmp_path}/ckpt", *args]
    outcome = run_tasks({case: python_command(RUN_TASK, *args)}, timeout=90, env=USER_MODELS)[case]
    assert_clean_failure(outcome, expected)
    assert not os.path.exists(tmp_path / "ckpt"), outcome.describe()


def test_non_utf8_cluster_file(tmp_path):
    path = tmp_path / "cluster.json"
    path.write_bytes(b'{"ps": ["h:1"], "worker": ["h\xff:2"]}')
    args = [f"--cluster_file={path}", "--job_name=ps", f"--checkpoint_dir={tmp_path}/c"]
    outcome = run_tasks({"ps": python_command(RUN_TASK, *args)}, timeout=60)["ps"]
    assert_clean_failure(outcome, "is not UTF-8 text (byte 0xff at offset 29)")


def mounted_tmpfs(path, options: str):
    """A small tmpfs at ``path`` (root only); the caller unmounts it."""
    os.makedirs(path)
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], check=True, timeout=20)


def test_environment_errors_are_one_line_and_status_5(tmp_path):
    """A checkpoint "folder" that is a file, or under one; as root also a read-only and a full file system."""
    (tmp_path / "afile").write_text("not a folder")
    folders = {"is a file": tmp_path / "afile", "under a file": tmp_path / "afile" / "ckpt"}
    mounts = []
    try:
        if os.geteuid() == 0:
            mounted_tmpfs(tmp_path / "ro", "ro,size=64k")
            mounts.append(tmp_path / "ro")
            mounted_tmpfs(tmp_path / "full", "size=64k")
            mounts.append(tmp_path / "full")
            with open(tmp_path / "full" / "filler", "wb", buffering=0) as filler, contextlib.suppress(OSError):
                filler.write(b"\0" * 128 * 1024)
            folders.update({"read-only": tmp_path / "ro" / "ckpt", "full": tmp_path / "full" / "ckpt"})
        expected = {
            "is a file": "a file is in the way of a folder",
            "under a file": "a path component is a file, not a folder",
            "read-only": "the file system is read-only",
            "full": "the disk is full",
        }
        commands = {
            name: python_command(
                RUN_TASK, f"--worker_hosts=localhost:{port}", "--job_name=worker", f"--checkpoint_dir={folder}"
            )
            for (name, folder), port in zip(folders.items(), free_ports(len(folders)), strict=True)
        }
        outcomes = run_tasks(commands, timeout=240)
        for name, outcome in outcomes.items():
            assert_clean_failure(outcome, expected[name], exit_code=5)
            assert str(folders[name]) in outcome.stderr, outcome.describe()
    finally:
        for mount in mounts:
            subprocess.run(["umount", str(mount)], check=False, timeout=20)


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def test_delta_checkpoints_of_a_model_without_dynamic_tables_are_refused(tmp_path):
    args = [f"--worker_hosts=localhost:{_PORTS[1]}", "--job_name=worker", "--model=softmax", "--train_steps=5"]
    args += ["--delta_checkpoint_steps=10", f"--checkpoint_dir={tmp_path}/c"]
    outcome = run_tasks({"chief": python_command(RUN_TASK, *args)}, timeout=120)["chief"]
    assert_clean_failure(outcome, "--delta_checkpoint_secs/--delta_checkpoint_steps need a model with dynamic tables")
