"""Runs tf.estimator's own test files against the installed package, the compat layer installed as run_legacy.py does.

    git -C ESTIMATOR_REPO worktree add /tmp/est v2.15.0     # a checkout of tensorflow/estimator at v2.15.0
    python scripts/estimator_suite.py /tmp/est --report=/tmp/suite.json [FILE_SUFFIX ...]
    python scripts/estimator_suite.py /tmp/est --plain ...   # the baseline: tf.compat.v1 behaviour, no compat layer
    # (run --plain with another interpreter, e.g. a venv with tensorflow==2.15.1, for the TF 2.15 baseline)

Each test file runs in a process of its own under pytest, after
``TF_USE_LEGACY_KERAS=1`` and ``legacy_tf.install()``, so its
``import tensorflow as tf`` is the legacy module, as an old script's is. The
test files are read from the checkout; what they import
(``tensorflow_estimator.python.estimator...``) is the installed package. Prints
and writes passed/failed/error/skipped/hung per file and in total. Nothing of the
checkout is copied into the project. A test that runs over --timeout_secs ends its
process (pytest-timeout's thread method); it is counted as hung and the file is run
again from the next test on (the tests already run and the hung one deselected).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys

# The files of the estimator's suite that exercise what the compat layer touches: RunConfig and
# TF_CONFIG, the Estimator and its input_fn, train_and_evaluate's roles, hooks, export, the canned estimators.
DEFAULT_FILES = (
    "run_config_test.py",
    "training_test.py",
    "estimator_test.py",
    "model_fn_test.py",
    "util_test.py",
    "exporter_test.py",
    "export/export_test.py",
    "early_stopping_test.py",
    "extenders_test.py",
    "gc_test.py",
    "hooks/hooks_test.py",
    "inputs/numpy_io_test.py",
    "canned/baseline_test.py",
    "canned/dnn_estimator_test.py",
    "canned/linear_estimator_test.py",
)
ESTIMATOR_DIR = os.path.join("tensorflow_estimator", "python", "estimator")


def _child(test_file: str, timeout_secs: int, plain: bool, deselect: list[str]) -> int:
    """In the child process: the compat layer (unless plain), then pytest on one file, verbose."""
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    if plain:  # the baseline: TensorFlow's own tf, with v1 behaviour as the legacy module has it
        import tensorflow as tf

        tf.compat.v1.disable_v2_behavior()
    else:
        from ps_toolkit_compat import legacy_tf

        legacy_tf.install()
    import pytest

    # importlib: the checkout is not put on sys.path, so the installed tensorflow_estimator is what runs.
    # thread: a test that hangs in TensorFlow's C++ code ends the process, naming itself (rerun without it).
    args = [test_file, "-v", "-p", "no:cacheprovider", "-p", "no:xdist", "--import-mode=importlib"]
    args += [f"--timeout={timeout_secs}", "--timeout-method=thread", "-c", os.devnull, "--rootdir", "/"]
    args += [f"--deselect={nodeid}" for nodeid in deselect]
    return pytest.main(args)


_RESULT = re.compile(r"^(\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)")
_STARTED = re.compile(r"^(\S+::\S+) ")
_KINDS = {"PASSED": "passed", "XPASS": "passed", "FAILED": "failed", "ERROR": "error", "SKIPPED": "skipped"}
KINDS = ("passed", "failed", "error", "skipped", "hung")


def _run_file(path: str, args) -> dict:
    """One test file's counts; a test that hangs is counted as hung and the file run again without it."""
    results: dict[str, str] = {}  # node id -> passed, failed, error, skipped
    hung: list[str] = []
    ended_early = None
    for _ in range(10):
        command = [sys.executable, os.path.abspath(__file__), os.path.abspath(args.checkout), "--child", path]
        command += [f"--timeout_secs={args.timeout_secs}"] + (["--plain"] if args.plain else [])
        command += [f"--deselect={nodeid}" for nodeid in [*hung, *results]]
        try:
            # From /, the root dir: the node ids it prints are the ones --deselect takes.
            output = subprocess.run(
                command, capture_output=True, text=True, errors="replace", timeout=args.file_timeout_secs, cwd="/"
            ).stdout
        except subprocess.TimeoutExpired as err:
            output = err.stdout.decode("utf-8", "replace") if isinstance(err.stdout, bytes) else (err.stdout or "")
        started = None
        for line in output.splitlines():
            result = _RESULT.match(line)
            if result:
                results[result.group(1)] = _KINDS.get(result.group(2), "skipped")
                started = None
            elif _STARTED.match(line):
                started = _STARTED.match(line).group(1)
        if "+++ Timeout +++" not in output:
            break
        if started is None or started in hung:
            ended_early = (output.strip().splitlines() or ["(no output)"])[-1][:200]
            break
        hung.append(started)
    counts: dict = {kind: sum(1 for k in results.values() if k == kind) for kind in KINDS[:4]}
    counts["hung"] = len(hung)
    counts["failures"] = [n.split("::", 1)[1] for n, k in results.items() if k in ("failed", "error")]
    counts["failures"] += [f"{n.split('::', 1)[1]}: hung (over {args.timeout_secs}s)" for n in hung]
    if ended_early:
        counts["failures"].append(f"the file ended early: {ended_early}")
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", help="a checkout of tensorflow/estimator (v2.15.0)")
    parser.add_argument("files", nargs="*", help=f"test files under {ESTIMATOR_DIR} (default: a chosen set)")
    parser.add_argument("--report", help="write the counts and each failure's name here (JSON)")
    parser.add_argument("--plain", action="store_true", help="TF's own tf, v1 behaviour, no compat layer")
    parser.add_argument("--timeout_secs", type=int, default=120, help="per test")
    parser.add_argument("--file_timeout_secs", type=int, default=3600)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--deselect", action="append", default=[], help=argparse.SUPPRESS)
    args = parser.parse_intermixed_args()  # options before, between or after the files
    if args.child:
        sys.exit(_child(args.child, args.timeout_secs, args.plain, args.deselect))
    root = os.path.join(args.checkout, ESTIMATOR_DIR)
    if not os.path.isdir(root):
        parser.error(f"{args.checkout} has no {ESTIMATOR_DIR}: give a checkout of tensorflow/estimator")
    report = {}
    for name in args.files or DEFAULT_FILES:
        report[name] = counts = _run_file(os.path.join(root, name), args)
        print(f"{name}: " + ", ".join(f"{k} {counts[k]}" for k in KINDS), flush=True)
    total = {k: sum(r[k] for r in report.values()) for k in KINDS}
    ran = total["passed"] + total["failed"] + total["error"] + total["hung"]
    print(f"total: {total} ({100.0 * total['passed'] / max(ran, 1):.1f}% of the tests run pass)")
    if args.report:
        with open(args.report, "w") as handle:
            json.dump({"total": total, "files": report}, handle, indent=1)


if __name__ == "__main__":
    main()
