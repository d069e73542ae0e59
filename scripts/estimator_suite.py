"""Runs tf.estimator's own test files against the installed package, the compat layer installed as run_legacy.py does.

    git -C ESTIMATOR_REPO worktree add /tmp/est v2.15.0     # a checkout of tensorflow/estimator at v2.15.0
    python scripts/estimator_suite.py /tmp/est --report=/tmp/suite.json [FILE_SUFFIX ...]
    python scripts/estimator_suite.py /tmp/est --plain ...   # the same files without the compat layer

Each test file runs in a process of its own under pytest (--timeout bounds a
hang), after ``TF_USE_LEGACY_KERAS=1`` and ``legacy_tf.install()``, so its
``import tensorflow as tf`` is the legacy module, as an old script's is. The
test files are read from the checkout; what they import
(``tensorflow_estimator.python.estimator...``) is the installed package. Prints
and writes passed/failed/error/skipped per file and in total. Nothing of the
checkout is copied into the project.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

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


def _child(test_file: str, junit: str, timeout_secs: int, plain: bool) -> int:
    """In the child process: the compat layer (unless plain), then pytest on one file."""
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    if not plain:
        from ps_toolkit_compat import legacy_tf

        legacy_tf.install()
    import pytest

    # importlib: the checkout is not put on sys.path, so the installed tensorflow_estimator is what runs.
    args = [test_file, "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "--import-mode=importlib", f"--junitxml={junit}"]
    args += [f"--timeout={timeout_secs}", "--rootdir", os.path.dirname(test_file), "-c", os.devnull]
    return pytest.main(args)


def _counts(junit: str) -> dict:
    counts = {"passed": 0, "failed": 0, "error": 0, "skipped": 0, "failures": []}
    if not os.path.exists(junit):
        return counts
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        kinds = [child.tag for child in case]
        name = f"{case.get('classname')}.{case.get('name')}"
        if "failure" in kinds or "error" in kinds:
            counts["failed" if "failure" in kinds else "error"] += 1
            detail = next(child for child in case if child.tag in ("failure", "error"))
            counts["failures"].append(f"{name}: {(detail.get('message') or '').splitlines()[0][:300]}")
        elif "skipped" in kinds:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", help="a checkout of tensorflow/estimator (v2.15.0)")
    parser.add_argument("files", nargs="*", help=f"test files under {ESTIMATOR_DIR} (default: a chosen set)")
    parser.add_argument("--report", help="write the counts and each failure's first line here (JSON)")
    parser.add_argument("--plain", action="store_true", help="without the compat layer (TensorFlow's own tf)")
    parser.add_argument("--timeout_secs", type=int, default=120, help="per test")
    parser.add_argument("--file_timeout_secs", type=int, default=1800)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--junit", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        sys.exit(_child(args.child, args.junit, args.timeout_secs, args.plain))
    root = os.path.join(args.checkout, ESTIMATOR_DIR)
    if not os.path.isdir(root):
        parser.error(f"{args.checkout} has no {ESTIMATOR_DIR}: give a checkout of tensorflow/estimator")
    report = {}
    for name in args.files or DEFAULT_FILES:
        junit = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"estimator-suite-{os.getpid()}.xml")
        command = [sys.executable, os.path.abspath(__file__), args.checkout, "--child", os.path.join(root, name)]
        command += ["--junit", junit, f"--timeout_secs={args.timeout_secs}"] + (["--plain"] if args.plain else [])
        try:
            subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=args.file_timeout_secs)
        except subprocess.TimeoutExpired:
            print(f"{name}: did not end within {args.file_timeout_secs}s", flush=True)
        report[name] = _counts(junit)
        if os.path.exists(junit):
            os.remove(junit)
        counts = report[name]
        print(f"{name}: " + ", ".join(f"{k} {counts[k]}" for k in ("passed", "failed", "error", "skipped")), flush=True)
    total = {k: sum(r[k] for r in report.values()) for k in ("passed", "failed", "error", "skipped")}
    ran = total["passed"] + total["failed"] + total["error"]
    print(f"total: {total} ({100.0 * total['passed'] / max(ran, 1):.1f}% of the tests run pass)")
    if args.report:
        with open(args.report, "w") as handle:
            json.dump({"total": total, "files": report}, handle, indent=1)


if __name__ == "__main__":
    main()
