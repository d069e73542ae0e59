"""Public TF1-era distributed scripts (tests/corpus, byte-identical) run unchanged on a local cluster."""

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "tests", "corpus")
sys.path.insert(0, CORPUS)
import make_data  # noqa: E402  (tests/corpus is not a package: its folders hold the scripts as published)

LAUNCH_LOCAL = os.path.join(ROOT, "scripts", "launch_local.py")
RUN_LEGACY = os.path.join(ROOT, "scripts", "run_legacy.py")
# The launcher ends a run that outlasts Case.timeout_secs (and every task with it); the test waits longer.
RUN_TIMEOUT_SECS = 240
CLEAN_RUNS = []


@dataclass
class Case:
    """One script: the folder it runs from, what follows run_legacy.py, the launcher's own flags, its data."""

    folder: str
    script: list
    cluster: list = field(default_factory=lambda: ["--num_ps=1", "--num_workers=2"])
    data: str = ""
    xfail: str = ""
    timeout_secs: int = 150
    # The script's own race, as TF 1.x ran it: the run ends clean, or stops on the race, which
    # race_signs ((file of the run folder, regular expression) pairs) must all show.
    race: str = ""
    race_signs: tuple = ()
    # A run the verdict must fail: (exit status, regular expression the launcher's output must show).
    fails_with: tuple = ()
    # A regular expression the launcher's success line must show (the evidence the verdict found).
    succeeds_with: str = ""
    # What follows run_legacy.py in a run of the same script on the same cluster that must succeed first
    # (a training run whose model_dir the case's own run restores).
    first: list = field(default_factory=list)
    # A file (glob pattern under the run's out folder) a clean run must have written.
    writes: str = ""
    # A script of our own of a public script's shape (its SOURCE.md says which), not a published one.
    own: bool = False


TWO_WORKERS = ["--num_ps=1", "--num_workers=2"]
# tf.estimator's train_and_evaluate wants a chief in a TF_CONFIG cluster.
ESTIMATOR = ["--num_ps=1", "--num_workers=1", "--chief"]
MASTER = ESTIMATOR + ["--chief_role_name=master"]
SSGD_WORKERS = "localhost:2223,localhost:2224"
CENSUS = ["-m", "trainer.task", "--train-files={data}/adult.data.csv", "--eval-files={data}/adult.test.csv"]
CENSUS += ["--job-dir={out}", "--train-steps=20", "--eval-steps=2", "--train-batch-size=20"]

CASES = {
    "tf_mnist_replica": Case(
        "tf_mnist_replica", ["mnist_replica.py", "--data_dir={data}", "--train_steps=30", "--num_gpus=0"], data="idx"
    ),
    "tf_mnist_replica_sync": Case(
        "tf_mnist_replica",
        ["mnist_replica.py", "--data_dir={data}", "--train_steps=20", "--num_gpus=0", "--sync_replicas"],
        data="idx",
        xfail="the script passes replica_id= to SyncReplicasOptimizer, an argument TF 1.0 removed (TF 0.12's class): "
        "TypeError on every TF 1.x too, not a compat cause",
    ),
    "kubeflow_dist_mnist_v1": Case(
        "kubeflow_dist_mnist_v1", ["dist_mnist.py", "--data_dir={data}", "--train_steps=30", "--num_gpus=0"], data="idx"
    ),
    "kubeflow_dist_mnist_compat_v1": Case(
        "kubeflow_dist_mnist_compat_v1",
        ["dist_mnist.py", "--data_dir={data}", "--train_steps=30", "--num_gpus=0"],
        data="idx",
    ),
    "kubeflow_tf_smoke": Case(
        "kubeflow_tf_smoke",
        ["tf_smoke.py"],
        cluster=MASTER,
        timeout_secs=45,
        xfail="Python 2 code: tf.constant(range(100), shape=[10, 10]) took range() as a list on Python 2 only; on "
        "Python 3 every TF 1.x raised 'Argument must be a dense tensor: range(0, 100)', which the script's @retrying "
        "retries for 3 minutes; and the smoke test trains nothing, which the verdict fails",
    ),
    "ecosystem_docker_mnist": Case(
        "ecosystem_docker_mnist",
        ["mnist.py", "--data_dir={data}", "--train_dir={out}"],
        data="tfrecords",
        timeout_secs=45,
        xfail="the script trains until it is stopped (no stop hook, an endless input queue): "
        "the launcher's --timeout_secs ends the run as FAILED, as it should",
    ),
    "cloudml_dist_mnist": Case(
        "cloudml_dist_mnist",
        ["-m", "trainer.task_p3", "--data_dir={data}", "--output_dir={out}", "--train_steps=20", "--eval_steps=2"],
        cluster=ESTIMATOR,
        data="tfrecords",
    ),
    "census_customestimator": Case("census_customestimator", CENSUS, cluster=ESTIMATOR, data="census"),
    "census_estimator": Case("census_estimator", CENSUS, cluster=ESTIMATOR, data="census"),
    # tf.contrib.learn.datasets.DATASETS['mnist'] reads the local IDX files; train_and_evaluate, then export.
    "kubeflow_examples_mnist": Case(
        "kubeflow_examples_mnist",
        ["model.py", "--tf-data-dir={data}", "--tf-model-dir={out}/model", "--tf-export-dir={out}/export"]
        + ["--tf-train-steps=30", "--tf-model-type=LINEAR", "--tf-batch-size=20"],
        cluster=ESTIMATOR,
        data="idx",
    ),
    # Cloud ML Engine's TF_CONFIG: the chief is "master".
    "census_tensorflowcore": Case(
        "census_tensorflowcore",
        CENSUS,
        cluster=MASTER,
        data="census",
        timeout_secs=70,  # its worker's 20 steps take ~4 s alone; a raced run waits for this
        race="the script's own race, as on TF 1.x: the master builds its input pipeline on /job:worker "
        "(replica_device_setter's default); a worker that trains the 20 steps and exits while the master still "
        "needs it (before the master's first step, or during one) leaves the master's session, re-created after "
        "the call to that worker failed, waiting for it",
        race_signs=(
            (
                "chief-0.log",
                r"/job:worker/replica:0/task:0 while calling /tensorflow.WorkerService/"
                r"(RegisterGraph|RunGraph|RecvTensor)",
            ),
            ("summary.txt", r"worker:0 .* 0 \(finished\)"),
            ("summary.txt", r"FAILED: the run did not end within --timeout_secs"),
        ),
    ),
    # The same script under the launcher's default chief name: its chief knows only "master", runs no branch
    # and exits 0 having done nothing; the verdict fails the run and names the role and the flag to try.
    "census_tensorflowcore_as_chief": Case(
        "census_tensorflowcore",
        CENSUS,
        cluster=ESTIMATOR,
        data="census",
        timeout_secs=70,
        fails_with=(
            1,
            r"FAILED: the chief \(chief:0\) finished with status 0, but nothing trained: .*likely cause: the "
            r"script's code names the chief role 'master' \(trainer/task\.py:\d+\), which this cluster does not "
            r"use \(its chief's job name is 'chief'\); try --chief_role_name=master",
        ),
    ),
    # Our own script of tf_cnn_benchmarks' TF 1.15 branch's shape (the package is too large to keep): TF 1.x
    # internal imports at the top, parameter_server on 1 ps + 2 workers; the verdict's evidence: `total images/sec`.
    "tf_cnn_benchmarks_shape": Case(
        "tf_cnn_benchmarks_shape",
        ["cnn_benchmarks_shape.py", "--variable_update=parameter_server", "--num_batches=10", "--batch_size=8"],
        timeout_secs=90,
        succeeds_with=r"its work: its throughput line 'total images/sec: [0-9.]+' \(worker:0\)",
        own=True,
    ),
    # TFRA's estimator demo in its serving mode: restores the model_dir its train mode wrote (the first run), exports
    # a SavedModel, trains nothing. Its tensorflow_datasets is a local stand-in in the folder (nothing downloads).
    "tfra_movielens_estimator_export": Case(
        "tfra_movielens_estimator",
        ["movielens-100k-estimator.py", "--mode=serving", "--model_dir={out}/ckpt", "--export_dir={out}/export"],
        cluster=ESTIMATOR,
        first=["movielens-100k-estimator.py", "--mode=train", "--model_dir={out}/ckpt"],
        writes="export/*/saved_model.pb",
        succeeds_with=r"its work: restored \S+/ckpt/model\.ckpt-\d+ and exported \S+/export/\d+ \(chief:0\)",
    ),
    # Its cluster is written into the script: the launcher serves those addresses (in its own network namespace).
    "tmulc18_ssgd": Case(
        "tmulc18_ssgd", ["ssgd.py"], cluster=["--ps_hosts=localhost:2222", f"--worker_hosts={SSGD_WORKERS}"]
    ),
}


def _make_data(kind, folder):
    if kind == "idx":
        make_data.mnist_idx(folder)
    elif kind == "tfrecords":
        make_data.mnist_tfrecords(folder)
    elif kind == "census":
        make_data.census_csv(os.path.join(folder, "adult.data.csv"), seed=0)
        make_data.census_csv(os.path.join(folder, "adult.test.csv"), rows=100, seed=1)


def run_case(case, tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    _make_data(case.data, str(data))
    if case.first:
        first = _launch(case, case.first, tmp_path / "first_run", data, out)
        assert first.returncode == 0, f"the first run failed: exit {first.returncode}\n{first.stdout[-6000:]}"
    return _launch(case, case.script, tmp_path / "run", data, out)


def _launch(case, script, run_dir, data, out):
    script = [part.format(data=data, out=out) for part in script]
    command = [sys.executable, LAUNCH_LOCAL, f"--log_dir={run_dir}", "--nochart", "--grace_secs=30"]
    command += [f"--timeout_secs={case.timeout_secs}"]
    command += case.cluster + ["--", sys.executable, RUN_LEGACY] + script
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    return subprocess.run(
        command,
        cwd=os.path.join(CORPUS, case.folder),
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECS,
    )


def _params():
    for name, case in CASES.items():
        marks = [pytest.mark.xfail(strict=True, reason=case.xfail)] if case.xfail else []
        yield pytest.param(name, marks=marks, id=name)


@pytest.mark.slow
@pytest.mark.corpus
@pytest.mark.parametrize("name", list(_params()))
def test_a_public_script_runs_unchanged_to_a_clean_end(name, tmp_path):
    case = CASES[name]
    proc = run_case(case, tmp_path)
    shown = f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-6000:]}\n--- stderr\n{proc.stderr[-3000:]}"
    if case.fails_with:
        code, said = case.fails_with
        assert proc.returncode == code and re.search(said, proc.stdout), shown
        return
    if proc.returncode != 0 and case.race:
        missing = [sign for sign in case.race_signs if not _shows(tmp_path / "run" / sign[0], sign[1])]
        assert not missing, f"neither a clean end nor the script's race (missing {missing}):\n{shown}"
        pytest.xfail(case.race)
    assert proc.returncode == 0, shown
    assert "launcher: succeeded" in proc.stdout, shown
    assert re.search(f"launcher: succeeded.*{case.succeeds_with}", proc.stdout), shown
    assert not case.writes or list((tmp_path / "out").glob(case.writes)), f"no {case.writes} written:\n{shown}"
    CLEAN_RUNS.append(name)


def _shows(path, pattern) -> bool:
    return path.exists() and re.search(pattern, path.read_text(errors="replace")) is not None


def teardown_module():
    public = len({case.folder for case in CASES.values() if not case.own})
    own = len({case.folder for case in CASES.values() if case.own})
    counts = f"{len(CLEAN_RUNS)} of {len(CASES)} runs ({public} public scripts, {own} of our own of a public shape)"
    print(f"\ncorpus: {counts} ended clean, unchanged: {CLEAN_RUNS}")
