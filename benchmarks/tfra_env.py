"""Makes (once) and finds the virtual environments of real TFRA that the baselines run on.

    python benchmarks/tfra_env.py tf2.15-tfra0.7      # prints the environment's python, or why there is none
    python benchmarks/tfra_env.py --list

    from benchmarks.tfra_env import ensure_env
    python, reason = ensure_env("tf2.15-tfra0.7")      # python is None where the environment cannot be made

Each environment is real TensorFlow with tensorflow-recommenders-addons from the package index,
installed by pip into ``~/.cache/ps_toolkit/tfra-envs/NAME`` (or ``$PS_TOOLKIT_TFRA_ENVS/NAME``).
It counts as made only once its TensorFlow and TFRA import at their pinned versions and a TFRA
table answers a lookup; a failed making leaves no environment behind. Standard library only, so
a benchmark can ask for an environment without importing TensorFlow here.
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import NamedTuple


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """One environment: the pins pip installs and the Python versions their wheels exist for."""

    tensorflow: str
    tfra: str
    pythons: tuple[str, ...]  # interpreter names tried in order; the wheels of both pins exist for each
    extras: tuple[str, ...] = ("pytest==8.3.5",)  # TFRA's test files run under pytest in the baseline

    def requirements(self) -> list[str]:
        return [f"tensorflow=={self.tensorflow}", f"tensorflow-recommenders-addons=={self.tfra}", *self.extras]


# TFRA 0.7.2 requires tensorflow<=2.15.1 and 0.8.1 tensorflow<=2.16.2; both ship wheels for cp39-cp311.
ENVS = {
    "tf2.15-tfra0.7": EnvSpec(tensorflow="2.15.1", tfra="0.7.2", pythons=("python3.11", "python3.10", "python3.9")),
    "tf2.16-tfra0.8": EnvSpec(tensorflow="2.16.2", tfra="0.8.1", pythons=("python3.11", "python3.10", "python3.9")),
}
ROOT_VARIABLE = "PS_TOOLKIT_TFRA_ENVS"
_MARKER = "ps_toolkit_env.json"  # written last: its presence, with the same pins, means the environment is made
_INSTALL_TIMEOUT_S = 1800.0  # TF 2.16 with TFRA 0.8 is ~800 MB of wheels
_CHECK_TIMEOUT_S = 300.0
_LOCK_WAIT_S = 2400.0  # another process making the same environment: wait for it at most this long

# Imports both at their versions and has a TFRA table answer a lookup, so the custom ops load.
_CHECK_SCRIPT = """
import json, sys
import tensorflow as tf
import tensorflow_recommenders_addons as tfra
tf.compat.v1.disable_v2_behavior()
table = tfra.dynamic_embedding.get_variable("probe", dim=2, initializer=0.5)
rows = tfra.dynamic_embedding.embedding_lookup(table, tf.constant([3, 7], tf.int64))
with tf.compat.v1.Session() as session:
    session.run(tf.compat.v1.global_variables_initializer())
    value = session.run(rows)
assert value.shape == (2, 2) and abs(float(value.sum()) - 2.0) < 1e-6, value
print(json.dumps({"tensorflow": tf.__version__, "tfra": tfra.__version__, "python": sys.version.split()[0]}))
"""


class TfraEnv(NamedTuple):
    """The environment's python (None where it cannot be made) and one line saying what happened."""

    python: str | None
    reason: str


def envs_root() -> str:
    """The folder that holds one folder per environment."""
    return os.environ.get(ROOT_VARIABLE) or os.path.join(os.path.expanduser("~"), ".cache", "ps_toolkit", "tfra-envs")


def ensure_env(name: str, root: str | None = None) -> TfraEnv:
    """Makes the environment ``name`` (a key of ENVS) unless it is made, and returns its python.

    Returns ``TfraEnv(None, reason)`` with a one-line reason where it cannot be made (no
    interpreter for its wheels, pip failing, the index out of reach, the check failing).
    """
    spec = ENVS.get(name)
    if spec is None:
        return TfraEnv(None, f"unknown TFRA environment {name!r}; known: {', '.join(sorted(ENVS))}")
    folder = os.path.join(root or envs_root(), name)
    python = os.path.join(folder, "bin", "python")
    if _is_made(folder, spec):
        return TfraEnv(python, f"{name} is made at {folder}")
    os.makedirs(os.path.dirname(folder), exist_ok=True)
    with open(folder + ".lock", "w") as lock:
        if not _lock(lock, _LOCK_WAIT_S):
            return TfraEnv(None, f"another process has been making {name} for over {_LOCK_WAIT_S:.0f} s ({lock.name})")
        if _is_made(folder, spec):  # made by the process that held the lock
            return TfraEnv(python, f"{name} is made at {folder}")
        reason = _make(folder, spec)
    if reason:
        return TfraEnv(None, f"cannot make {name}: {reason}")
    return TfraEnv(python, f"{name} made at {folder}")


def _is_made(folder: str, spec: EnvSpec) -> bool:
    try:
        with open(os.path.join(folder, _MARKER)) as marker:
            made = json.load(marker)
    except (OSError, ValueError):
        return False
    return made.get("requirements") == spec.requirements() and os.path.exists(os.path.join(folder, "bin", "python"))


def _lock(lock_file, wait_s: float) -> bool:
    """Takes an exclusive lock on lock_file, waiting at most wait_s for a holder to let go."""
    deadline = time.monotonic() + wait_s
    tick = threading.Event()  # never set: its bounded wait paces the tries
    while True:
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            tick.wait(2.0)


def _base_python(spec: EnvSpec) -> str | None:
    current = f"python{sys.version_info.major}.{sys.version_info.minor}"
    if current in spec.pythons:
        return sys.executable
    for candidate in spec.pythons:
        found = shutil.which(candidate)
        if found:
            return found
    return None


def _make(folder: str, spec: EnvSpec) -> str:
    """Makes the environment in folder; returns "" or why it could not (then folder is gone)."""
    base = _base_python(spec)
    if base is None:
        return f"no interpreter for the wheels on PATH (looked for {', '.join(spec.pythons)})"
    shutil.rmtree(folder, ignore_errors=True)  # a making that was killed half-way
    python = os.path.join(folder, "bin", "python")
    steps = (
        ([base, "-m", "venv", folder], 120.0, "python -m venv"),
        ([python, "-m", "pip", "install", "-q", *spec.requirements()], _INSTALL_TIMEOUT_S, "pip install"),
        ([python, "-c", _CHECK_SCRIPT], _CHECK_TIMEOUT_S, "the import check"),
    )
    output = ""
    for command, timeout_s, what in steps:
        failure, output = _run(command, timeout_s)
        if failure:
            shutil.rmtree(folder, ignore_errors=True)
            return f"{what} {failure}"
    versions = json.loads(output.strip().splitlines()[-1])
    made = {"requirements": spec.requirements(), **versions}
    with open(os.path.join(folder, _MARKER), "w") as marker:
        json.dump(made, marker)
    return ""


def _run(command: list[str], timeout_s: float) -> tuple[str, str]:
    """Runs command in its own process group; returns (failure or "", stdout). The group ends either way."""
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return f"ran past {timeout_s:.0f} s", ""
    except BaseException:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    if process.returncode != 0:
        lines = [line for line in (err or out).strip().splitlines() if line.strip()]
        return f"exited {process.returncode}: {lines[-1].strip() if lines else 'no output'}", out
    return "", out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Makes or finds a real-TFRA virtual environment.")
    parser.add_argument("name", nargs="?", help=f"one of {', '.join(sorted(ENVS))}")
    parser.add_argument(
        "--root", default=None, help=f"folder of the environments (default ${ROOT_VARIABLE} or ~/.cache)"
    )
    parser.add_argument("--list", action="store_true", help="list the environments and whether each is made")
    args = parser.parse_args(argv)
    root = args.root or envs_root()
    if args.list:
        for name, spec in sorted(ENVS.items()):
            made = "made" if _is_made(os.path.join(root, name), spec) else "not made"
            print(f"{name}: {' '.join(spec.requirements())} ({made})")
        return 0
    if not args.name:
        parser.error("name an environment or pass --list")
    python, reason = ensure_env(args.name, root)
    if python is None:
        print(reason, file=sys.stderr)
        return 1
    print(python)
    return 0


if __name__ == "__main__":
    sys.exit(main())
