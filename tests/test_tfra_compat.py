"""TFRA scripts unchanged: ``import tensorflow_recommenders_addons`` under run_legacy.py, on ps_toolkit's tables.

The probe script (fixtures_legacy/tfra_probe.py) measures TFRA's graph-mode
behaviour in one process; the PS and estimator scripts run on real local
clusters (slow): by launch_local.py and by hand.
"""

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from fixtures_legacy.launch import RUN_LEGACY, launch, legacy
from taskrun import REPO, loopback_hosts, run_script

from ps_toolkit.process.group import ProcessGroup
from ps_toolkit.process.starter import make_starter
from ps_toolkit_compat.tfra import install, refused

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures_legacy")
PROBE = os.path.join(FIXTURES, "tfra_probe.py")
PS_SCRIPT = os.path.join(FIXTURES, "tfra_ps.py")
ESTIMATOR_SCRIPT = os.path.join(FIXTURES, "tfra_estimator.py")
SYNC_SCRIPT = os.path.join(FIXTURES, "tfra_sync.py")
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2"}


def run_legacy(args, timeout=180, extra_env=None):
    """``python scripts/run_legacy.py ARGS``, without this process's TF_CONFIG unless ``extra_env`` gives one."""
    env = {name: value for name, value in os.environ.items() if name != "TF_CONFIG"}
    env.update(QUIET, **(extra_env or {}))
    return run_script([sys.executable, RUN_LEGACY, *args], timeout=timeout, env=env)


def explain(proc) -> str:
    return f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-4000:]}"


def json_lines(text: str, key: str) -> list:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{") and f'"{key}"' in line]


@pytest.fixture(scope="module")
def probe():
    """Every check of the probe script, run once: {check name: what it printed}."""
    checks = ["defaults_and_errors", "lookups", "optimizers", "restrict", "inference_mode", "keys_and_trainable"]
    proc = run_legacy([PROBE, *checks], timeout=300)
    assert proc.returncode == 0, explain(proc)
    found = {line["check"]: line for line in json_lines(proc.stdout, "check")}
    assert sorted(found) == sorted(checks), explain(proc)
    return found


def test_errors_are_the_types_tfra_raised(probe):
    out = probe["defaults_and_errors"]
    assert (out["key_dtype"], out["value_dtype"], out["dim"]) == ("int64", "float32", 1)
    assert out["reused"] is True
    assert out["python_ints"] == [2, 1]
    expected = {
        "same_name": ("ValueError", "Variable t1 already exists, disallowed"),
        "bad_dtypes": ("TypeError", "key-value dtype (float32-float32) is not support"),
        "ids_dtype": ("TypeError", "params.key_dtype should be same with ids.dtype"),
        "float_ids": ("TypeError", "params.key_dtype should be same with ids.dtype"),
        "two_params": ("ValueError", "Only one params is allowed."),
        "not_a_variable": ("TypeError", "params should be a Variable instance."),
        "bad_combiner": ("ValueError", "combiner must be one of 'mean', 'sqrtn' or 'sum'"),
        "dense_sp_ids": ("TypeError", "sp_ids must be SparseTensor"),
        "policy_not_class": ("TypeError", "restrict_policy must be subclass of RestrictPolicy."),
        "kv_creator_gpu": ("AttributeError", "dynamic_embedding.HkvHashTableCreator is not served"),
    }
    for check, (error_type, text) in expected.items():
        mro, message = out[check]
        assert error_type in mro and "ConfigError" in mro and text in message, (check, mro, message)


def test_lookups_match_tfras_arithmetic(probe):
    out = probe["lookups"]
    row = np.full(3, -1.0)  # initializer=-1.0: every id never trained reads -1 in every column
    assert np.allclose(out["dense"], np.broadcast_to(row, (2, 3, 3))) and out["dense_static_shape"] == [2, 3, 3]
    assert np.allclose(out["unique"], out["dense"])
    # sp_ids rows: [1 (w 2), 3 (w 0.5)], [2 (w 1)], [1 (w 3)].
    sums = np.array([2.5, 1.0, 3.0])[:, None] * row
    assert np.allclose(out["combined"]["sum"], sums)
    assert np.allclose(out["combined"]["mean"], sums / np.array([2.5, 1.0, 3.0])[:, None])
    assert np.allclose(out["combined"]["sqrtn"], sums / np.sqrt([4.25, 1.0, 9.0])[:, None])
    assert np.allclose(out["safe"], [row, np.zeros(3), row])  # the empty entry: zeros
    assert np.allclose(out["safe_default"], [row, row, row])  # ... or default_id's row
    assert np.allclose(out["clipped"], [row / np.sqrt(3.0)])  # max_norm=1
    assert out["size"] == 0  # lookups insert nothing


@pytest.mark.parametrize(
    "name",
    [
        "sgd",
        "momentum",
        "adagrad",
        "adam",
        "ftrl",
        "rmsprop",
        "adadelta",
        "adagrad_da",
        "proximal_adagrad",
        "proximal_sgd",
    ],
)
def test_dynamic_embedding_optimizer_trains_rows_as_tf_trains_a_variable(probe, name):
    out = probe["optimizers"][name]
    assert out["returns_the_same_optimizer"] and out["still_its_class"] and out["trainable_params_is_var"]
    assert out["size_before"] == 0 and out["sizes_after"] == [2, 2], out
    assert out["global_step"] == 5 and out["last_loss"] < out["first_loss"], out
    # The table's rows after five steps are the rows TF's own optimizer gives a dense variable.
    assert np.allclose(out["table_rows"], out["dense_rows"], rtol=1e-4, atol=1e-5), out
    assert np.allclose(out["untouched_row"], [[0.5, 0.5]])


def test_an_optimizer_the_tables_cannot_apply_is_refused_in_one_line(probe):
    mro, message = probe["optimizers"]["unknown"]
    assert "NotImplementedError" in mro and "cannot be trained by Optimizer" in message and "\n" not in message


def test_restrict_policies_evict_the_oldest_or_rarest(probe):
    out = probe["restrict"]
    # ids 0-5 in step 1, then 4-8 twice: 0-3 are both the oldest and the least often seen.
    assert out["timestamp"] == {"before": 9, "after": 5, "kept": [4, 5, 6, 7, 8]}
    assert out["frequency"] == {"before": 9, "after": 5, "kept": [4, 5, 6, 7, 8]}
    assert out["timestamp_under_trigger"]["after"] == 9  # size 9 <= trigger 100: nothing evicted
    assert out["no_policy_gives_none"] is True


def test_inference_mode_reads_without_inserting(probe):
    out = probe["inference_mode"]
    assert out["mode"] == out["wrapper_mode"] == "inference", out
    # Id 1 was trained one SGD step on sum(rows) (-1 per column); id 3 was never seen: zeros, not inserted.
    assert out["rows"] == [[-1.0, -1.0], [0.0, 0.0]] and out["size"] == 2, out


def test_int32_keys_a_frozen_table_and_sync_replicas_refusing_string_ids(probe):
    out = probe["keys_and_trainable"]
    # One SGD step (rate 1) on sum(rows) from rows of ones: zeros; int32 keys come back as int32.
    assert out["int_keys"] == [1, 2] and out["int_keys_dtype"] == "int32" and out["int_rows"] == [[0.0, 0.0]] * 2
    assert out["frozen_size"] == 0  # trainable=False: never trained, never grown
    assert out["sync_replicas"]["int_keys"] is None, out  # built (trained on a cluster: the slow test below)
    mro, message = out["sync_replicas"]["string_keys"]
    assert "NotImplementedError" in mro and "SyncReplicasOptimizer around a DynamicEmbeddingOptimizer" in message
    assert "int64 ids only" in message and "\n" not in message, message
    mro, message = out["sync_replicas"]["inside"]
    assert "NotImplementedError" in mro and "SyncReplicasOptimizer" in message and "\n" not in message, message


@pytest.mark.parametrize(
    ("statement", "name"),
    [
        ("from tensorflow_recommenders_addons.dynamic_embedding import keras", "dynamic_embedding.keras"),
        ("import tensorflow_recommenders_addons.embedding_variable", "embedding_variable"),
        ("tfra.dynamic_embedding.RedisTableCreator()", "dynamic_embedding.RedisTableCreator"),
    ],
)
def test_what_is_not_served_ends_the_script_in_one_line(tmp_path, statement, name):
    script = tmp_path / "old.py"
    script.write_text(f"import tensorflow_recommenders_addons as tfra\n{statement}\n")
    proc = run_legacy([str(script)], timeout=120)
    assert proc.returncode == 2, explain(proc)
    # The refusal names the file and line that used the name.
    assert proc.stderr.strip().splitlines()[-1] == f"{script}:2: error: {refused.message(name)}", explain(proc)
    assert "Traceback" not in proc.stderr, explain(proc)


def test_a_normal_program_opts_in_and_is_told_eager_is_not_served():
    install.install()
    try:
        import tensorflow_recommenders_addons as tfra

        assert tfra.__version__.endswith("+ps_toolkit")
        assert not hasattr(tfra.dynamic_embedding, "HkvHashTable")
        with pytest.raises(refused.NotServedUseError, match="in eager mode is not served"):
            tfra.dynamic_embedding.get_variable("eager_table", dim=2)
    finally:
        install.uninstall()


def _worker_results(logs: dict) -> dict:
    found = {}
    for name, text in logs.items():
        for line in json_lines(text, "tfra_result"):
            found[name] = line
    return found


def _assert_ps_script_trained(results: dict, num_reserved: int, batch_size: int) -> None:
    chief, other = results["worker-0"], results["worker-1"]
    for worker in (chief, other):
        assert worker["recent_loss"] < 0.6, worker  # the mean of its last 20 steps; the best constant scores 0.69
        assert worker["trainable_params_is_table"] is True
    # The tables grew with the ids, and each restrict (every 30 of the chief's steps) cut them back.
    assert chief["restricts"], chief
    for cut in chief["restricts"]:
        for table in ("user", "item"):
            before, after = cut["before"][table], cut["after"][table]
            # Each step the other worker took between the restrict and the size read may add a batch of new
            # ids (a step already under way when the restrict ran, one more).
            bound = num_reserved + (cut["others"] + 1) * batch_size
            assert before > num_reserved and after <= bound and after < before, cut
        assert cut["after"]["tag"] == cut["before"]["tag"], cut  # no restrict policy: never restricted
    inference = chief["inference"]
    assert inference["restored_sizes"] == inference["sizes_after_lookups"], inference
    assert inference["restored_sizes"]["user"] > 0 and inference["predictions_finite"], inference
    assert inference["known_row_nonzero"] and inference["model_mode"] == "inference", inference


@pytest.mark.slow
def test_tfra_ps_script_runs_unchanged_on_launch_local(tmp_path):
    args = [f"--checkpoint_dir={tmp_path}/ckpt", "--train_steps=80", "--restrict_every=30", "--num_reserved=200"]
    run = launch(tmp_path / "run", ["--num_ps=2", "--num_workers=2"], legacy(PS_SCRIPT, *args), timeout_secs=240)
    assert run.returncode == 0, run.describe()
    results = _worker_results(run.logs)
    assert set(results) == {"ps-0", "ps-1", "worker-0", "worker-1"}, run.describe()
    _assert_ps_script_trained(results, num_reserved=200, batch_size=64)


@pytest.mark.slow
def test_sync_replicas_around_dynamic_embedding_optimizer_aggregates_each_ids_rows_once_per_step(tmp_path):
    steps, rate = 40, 0.01
    args = [f"--checkpoint_dir={tmp_path}/ckpt", f"--train_steps={steps}", f"--learning_rate={rate}"]
    run = launch(tmp_path / "run", ["--num_ps=2", "--num_workers=2"], legacy(SYNC_SCRIPT, *args), timeout_secs=240)
    assert run.returncode == 0, run.describe()
    chief = _worker_results(run.logs)["worker-0"]
    # Every replica's gradient is 1 per lookup (id 2 is looked up twice): the mean over replicas, applied
    # once per sync step, moves each row by -rate * lookups * steps; per replica or summed, it moves further.
    # The chief's aggregation may apply a step more while its session closes: rows and step are read together.
    applied = chief["global_step"]
    assert steps <= applied <= steps + 2 and chief["size"] == 3, chief
    expected = [[-rate * applied] * 2, [-2 * rate * applied] * 2, [-rate * applied] * 2]
    np.testing.assert_allclose(chief["rows"], expected, rtol=1e-5)
    assert chief["scale"] == pytest.approx(-rate * applied, rel=1e-5), chief


@pytest.mark.slow
def test_tfra_ps_script_runs_unchanged_started_by_hand(tmp_path):
    ps_hosts, worker_hosts, reservation = loopback_hosts(1, 2)
    common = [f"--ps_hosts={ps_hosts}", f"--worker_hosts={worker_hosts}", f"--checkpoint_dir={tmp_path}/ckpt"]
    common += ["--train_steps=80", "--restrict_every=30", "--num_reserved=200"]
    tasks = {"ps-0": ["--job_name=ps", "--task_index=0"]}
    tasks.update({f"worker-{i}": ["--job_name=worker", f"--task_index={i}"] for i in (0, 1)})
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env.update(QUIET, PYTHONUNBUFFERED="1")
    outputs = {}
    with reservation, ProcessGroup(make_starter("fork"), stop_grace_secs=0.0) as group:
        for name, flags in tasks.items():
            outputs[name] = []
            command = [sys.executable, RUN_LEGACY, PS_SCRIPT, *common, *flags]
            proc = group.start(name, command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=REPO)
            group.add_pipe(proc.stdout, outputs[name].append)
        codes = group.wait(["worker-0", "worker-1"], time.monotonic() + 300)
        # A hand-started TF1 ps serves until it is stopped (server.join()), as it did in TF 1.x.
        ps_still_serving = group.alive("ps-0")
        group.kill("ps-0")
        group.drain(time.monotonic() + 10)
    logs = {name: b"".join(chunks).decode("utf-8", "replace") for name, chunks in outputs.items()}
    report = "\n".join(f"--- {name}: exit {codes.get(name)}\n{text[-4000:]}" for name, text in logs.items())
    assert codes == {"worker-0": 0, "worker-1": 0} and ps_still_serving, report
    _assert_ps_script_trained(_worker_results(logs), num_reserved=200, batch_size=64)


SERVE = """
import json, sys
import tensorflow as tf
serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
out = serve(movie_id=tf.constant([1, 2, 10**12], tf.int64), user_id=tf.constant([1, 4, 10**12], tf.int64),
            user_rating=tf.zeros([3]))
print(json.dumps({name: value.numpy().tolist() for name, value in out.items()}))
"""


@pytest.mark.slow
def test_tfra_estimator_script_trains_on_every_role_then_exports_a_model_tensorflow_alone_serves(tmp_path):
    model_dir, export_dir = tmp_path / "model", tmp_path / "export"
    launcher = ["--chief", "--num_workers=1", "--num_ps=2", "--evaluator", "--grace_secs=30", "--ps_grace_secs=30"]
    command = legacy(ESTIMATOR_SCRIPT, f"--model_dir={model_dir}", "--max_steps=200")
    run = launch(tmp_path / "run", launcher, command, timeout_secs=300)
    assert run.returncode == 0, run.describe()
    trained = {line["tfra_result"] for text in run.logs.values() for line in json_lines(text, "tfra_result")}
    assert trained == {"chief", "worker", "evaluator"}, run.describe()
    # The demo's export: the chief, by hand, with its TF_CONFIG, in inference mode.
    cluster = {"chief": ["localhost:1"], "worker": ["localhost:2"], "ps": ["localhost:3", "localhost:4"]}
    tf_config = json.dumps({"cluster": cluster, "task": {"type": "chief", "index": 0}})
    args = [ESTIMATOR_SCRIPT, f"--model_dir={model_dir}", "--mode=serving", f"--export_dir={export_dir}"]
    export = run_legacy(args, timeout=180, extra_env={"TF_CONFIG": tf_config})
    assert export.returncode == 0, explain(export)
    (exported,) = json_lines(export.stdout, "tfra_result")
    # Served by TensorFlow alone: no compat layer, no ps_toolkit.
    script = tmp_path / "serve.py"
    script.write_text(SERVE)
    served = run_script([sys.executable, str(script), exported["path"]], timeout=120, env=dict(os.environ, **QUIET))
    assert served.returncode == 0, explain(served)
    (out,) = json_lines(served.stdout, "out")
    known, other, unknown = out["out"]
    # Ratings are user % 4 + movie % 3 (here 2 and 2); an id never trained reads a zero row.
    assert abs(known - 2.0) < 1.0 and abs(other - 2.0) < 1.0, out
    assert known != unknown and other != unknown, out


def test_tfra_initializers_become_rows_that_depend_on_the_id_only():
    import tensorflow as tf

    from ps_toolkit_compat.tfra import initializers

    ids = tf.range(20000, dtype=tf.int64)
    normal = initializers.rows_for(tf.keras.initializers.RandomNormal(-1.0, 0.5), 4, "t").rows(ids, 4, tf.float32)
    assert abs(float(tf.reduce_mean(normal)) + 1.0) < 0.02 and abs(float(tf.math.reduce_std(normal)) - 0.5) < 0.02
    again = initializers.rows_for(tf.keras.initializers.RandomNormal(-1.0, 0.5), 4, "t").rows(ids[:5], 4, tf.float32)
    assert np.array_equal(again.numpy(), normal.numpy()[:5])  # the same id, the same row
    other_table = initializers.rows_for(tf.keras.initializers.RandomNormal(-1.0, 0.5), 4, "u").rows(
        ids[:5], 4, tf.float32
    )
    assert not np.allclose(other_table.numpy(), normal.numpy()[:5])  # another table starts elsewhere
    truncated = initializers.rows_for(tf.compat.v1.truncated_normal_initializer(0.0, 2.0), 3, "t").rows(
        ids, 3, tf.float32
    )
    assert float(tf.reduce_max(tf.abs(truncated))) <= 4.0 + 1e-5 and float(tf.math.reduce_std(truncated)) > 1.5
    uniform = initializers.rows_for(tf.keras.initializers.RandomUniform(2.0, 3.0), 2, "t").rows(ids, 2, tf.float32)
    assert float(tf.reduce_min(uniform)) >= 2.0 and float(tf.reduce_max(uniform)) <= 3.0
    vector = initializers.rows_for([1.0, 2.0, 3.0], 3, "t").rows(ids[:2], 3, tf.float32)
    assert vector.numpy().tolist() == [[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]
    assert initializers.rows_for(None, 2, "t").rows(ids[:1], 2, tf.float32).numpy().tolist() == [[0.0, 0.0]]
    assert initializers.rows_for(tf.keras.initializers.Constant(7), 2, "t").rows(
        ids[:1], 2, tf.float32
    ).numpy().tolist() == [[7.0, 7.0]]
    glorot = initializers.rows_for(tf.keras.initializers.GlorotUniform(), 2, "t").rows(ids[:3], 2, tf.float32)
    assert glorot.shape == (3, 2)  # called per lookup, as TFRA did
