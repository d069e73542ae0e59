"""The package as a user installs it: a wheel in a fresh virtual environment, run from outside the checkout.

The environment sees the system's site-packages (TensorFlow and the other dependencies are
already installed there) but gets ps_toolkit and its compat layer only from the wheel; the test
checks that every import resolves inside the environment before it runs the main job
(``ps-launch-local``) and an old TF1 script (``ps-run-legacy``).
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The checkout's own build products and caches never go into the wheel's source.
CACHES_IGNORED = shutil.ignore_patterns(
    ".git", "__pycache__", "*.egg-info", "build", "dist", ".pytest_cache", ".ruff_cache", ".import_linter_cache"
)


def copy_ignored(folder, names):
    """What the wheel's source copy leaves out: caches, and any virtual environment (a folder holding
    pyvenv.cfg: the README makes .venv in the checkout, GBs of TensorFlow, Ray and Spark)."""
    ignored = set(CACHES_IGNORED(folder, names))
    ignored.update(name for name in names if os.path.isfile(os.path.join(folder, name, "pyvenv.cfg")))
    return ignored


COMMANDS = (
    "ps-run-task",
    "ps-launch-local",
    "ps-run-legacy",
    "ps-make-slurm-job",
    "ps-make-tfjob",
    "ps-convert-embeddings",
)

LEGACY_SCRIPT = textwrap.dedent(
    """\
    import tensorflow as tf

    x = tf.placeholder(tf.float32, [None, 1])
    w = tf.Variable([[0.0]])
    loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - 2.0 * x))
    train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    with tf.Session() as session:
        session.run(tf.global_variables_initializer())
        for _ in range(200):
            session.run(train, {x: [[1.0], [2.0]]})
        print("legacy weight %.2f" % session.run(w)[0][0])
    """
)


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A virtual environment with the wheel built from this checkout installed, and a folder outside the checkout."""
    root = tmp_path_factory.mktemp("wheel")
    source, wheels, env_dir = root / "source", root / "wheels", root / "venv"
    shutil.copytree(REPO, source, ignore=copy_ignored)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    built = subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("ps_toolkit-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        benchmark_files = [name for name in archive.namelist() if "benchmark" in name]
    assert not benchmark_files, f"the wheel ships benchmark code: {benchmark_files}"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(env_dir)], check=True, timeout=120)
    python = env_dir / "bin" / "python"
    see_this_environments_packages(python)
    installed = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "--disable-pip-version-check",
            "-q",
            "install",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr
    outside = root / "elsewhere"
    outside.mkdir()
    return env_dir, outside


def see_this_environments_packages(python) -> None:
    """Run from a virtual environment (as the README's quick start makes), the new one's
    --system-site-packages reaches the base interpreter's packages only: it is given this
    environment's too, after its own (the wheel first). A path a .pth file adds is not scanned for
    .pth files itself, so this checkout's editable install does not come along."""
    if sys.prefix == sys.base_prefix:
        return
    ours = sysconfig.get_paths()["purelib"]
    query = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    theirs = subprocess.run([str(python), "-c", query], capture_output=True, text=True, check=True, timeout=60)
    with open(os.path.join(theirs.stdout.strip(), "_enclosing_venv.pth"), "w", encoding="utf-8") as handle:
        handle.write(ours + "\n")


def _env_without_checkout() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _run(args, cwd, timeout=300):
    return subprocess.run(args, cwd=cwd, env=_env_without_checkout(), capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_the_wheel_installs_every_command_and_imports_only_from_the_environment(venv):
    env_dir, outside = venv
    for command in COMMANDS:
        assert (env_dir / "bin" / command).is_file(), command
    probe = "import json, ps_toolkit as p, ps_toolkit_compat as c; print(json.dumps([p.__file__, c.__file__]))"
    result = _run([str(env_dir / "bin" / "python"), "-c", probe], outside)
    assert result.returncode == 0, result.stderr
    for path in json.loads(result.stdout):
        assert path.startswith(str(env_dir)), path
    helped = _run([str(env_dir / "bin" / "ps-run-task"), "--help"], outside)
    assert helped.returncode == 0 and "--train_steps" in helped.stdout, helped.stdout + helped.stderr


@pytest.mark.slow
def test_the_main_job_runs_from_the_installed_command(venv):
    env_dir, outside = venv
    log_dir = outside / "run"
    result = _run(
        [str(env_dir / "bin" / "ps-launch-local"), "--quiet", "--train_steps=300", f"--log_dir={log_dir}"], outside
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "succeeded" in result.stdout, result.stdout[-3000:]
    assert (log_dir / "summary.txt").is_file()
    assert (log_dir / "progress.png").stat().st_size > 0  # drawn with the environment's own matplotlib


@pytest.mark.slow
def test_a_legacy_script_runs_from_the_installed_command(venv):
    env_dir, outside = venv
    script = outside / "old_tf1_script.py"
    script.write_text(LEGACY_SCRIPT)
    result = _run([str(env_dir / "bin" / "ps-run-legacy"), str(script)], outside)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "legacy weight 2.00" in result.stdout, result.stdout
