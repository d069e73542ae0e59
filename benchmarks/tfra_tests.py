"""Runs TFRA v0.7.2's graph-mode kernel tests unchanged on real TFRA and through run_legacy.py; prints the pass rate.

    python benchmarks/tfra_tests.py --tfra_source=/path/to/recommenders-addons-0.7.2
    python benchmarks/tfra_tests.py --tfra_source=DIR --baseline_json=docs/bench/tfra-0.7.2-baseline.json
    python benchmarks/tfra_tests.py --tfra_source=DIR --only_baseline --save_baseline=BASELINE.json

Each of the four test files (FILES) is copied byte for byte into a scratch folder (so neither run
imports TFRA's source tree in place of the package under test) and run by pytest twice:
- the baseline: real TFRA 0.7.2 on TensorFlow 2.15.1 in its virtual environment (benchmarks/tfra_env.py);
- here: ``python scripts/run_legacy.py -m pytest FILE``, TensorFlow 2.21 with ps_toolkit's TFRA layer.
Both runs load the same pytest plugin (GRAPH_HALVES) before the file is imported: it calls
``tf.compat.v1.disable_v2_behavior()`` and makes TensorFlow's ``run_in_graph_and_eager_modes`` (and so
``run_all_in_graph_and_eager_modes``) run a test's graph-mode half only, so a test counts by its graph
half (a skipped graph half: skipped) and the eager halves, which the compat layer refuses, are not run.
Prints per file and overall the share of the tests passing on the baseline that pass here, and each
one that does not with its one-line reason. ``--baseline_json`` reads an earlier baseline instead of
running real TFRA; ``--out`` writes both runs and the rates as JSON. Every process started is ended.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time

# The checkout's benchmarks and ps_toolkit, as scripts/benchmark.py finds them.
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from benchmarks import tfra_env  # noqa: E402
from benchmarks.tfra_test_results import FileRun, compare, format_rates, one_line, parse_junit  # noqa: E402

TESTS_DIR = os.path.join("tensorflow_recommenders_addons", "dynamic_embedding", "python", "kernel_tests")
FILES = (
    "dynamic_embedding_variable_test.py",
    "dynamic_embedding_ops_test.py",
    "dynamic_embedding_optimizer_test.py",
    "restrict_policies_test.py",
)
BASELINE_ENV = "tf2.15-tfra0.7"
BASELINE_NAME = "real TFRA 0.7.2 on TF 2.15.1"
HERE_NAME = "scripts/run_legacy.py on this TensorFlow"
# Imported by both runs' pytest (-p) before it collects a file: graph mode, and the graph halves only.
GRAPH_HALVES = """
import tensorflow as tf
from tensorflow.python.eager import context
from tensorflow.python.framework import test_util
from tensorflow.python.util import tf_decorator

tf.compat.v1.disable_v2_behavior()


def run_in_graph_and_eager_modes(func=None, config=None, use_gpu=True, assert_no_eager_garbage=False):
    # TensorFlow's decorator less its eager half: the test in graph mode, in its test session.
    def decorator(f):
        def decorated(self, *args, **kwargs):
            with context.graph_mode(), self.test_session(use_gpu=use_gpu, config=config):
                f(self, *args, **kwargs)

        return tf_decorator.make_decorator(f, decorated)

    return decorator(func) if func is not None else decorator


test_util.run_in_graph_and_eager_modes = run_in_graph_and_eager_modes
"""
_PLUGIN_MODULE = "tfra_tests_graph_halves"
_TEST_TIMEOUT_S = 300  # one test here (pytest-timeout), so a hung test costs one test, not its file


class UsageError(Exception):
    """Bad input: said in one line, exit status 2."""


def sources(tfra_source: str, names: list[str]) -> dict[str, str]:
    """Each test file's path in TFRA's source tree; UsageError naming what is missing."""
    if not os.path.isdir(tfra_source):
        raise UsageError(f"--tfra_source={tfra_source} is not a folder")
    paths = {}
    for name in names:
        path = os.path.join(tfra_source, TESTS_DIR, name)
        if not os.path.isfile(path):
            raise UsageError(
                f"--tfra_source={tfra_source} has no {os.path.join(TESTS_DIR, name)} (TFRA v0.7.2's tree?)"
            )
        paths[name] = path
    return paths


def run_file(command: list[str], scratch: str, module: str, timeout_s: float, env: dict) -> FileRun:
    """Runs pytest's ``command`` (JUnit XML to scratch/junit.xml) in scratch; its process group ends either way."""
    junit = os.path.join(scratch, "junit.xml")
    if os.path.exists(junit):
        os.remove(junit)
    log = os.path.join(scratch, module + ".log")
    started = time.monotonic()
    with open(log, "w") as out:
        process = subprocess.Popen(
            command, cwd=scratch, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            process.wait(timeout=timeout_s)
            ended = ""
        except subprocess.TimeoutExpired:
            ended = f"the file's run passed --file_timeout_s={timeout_s:.0f}"
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    wall_s = time.monotonic() - started
    if not os.path.exists(junit):
        with open(log) as out:
            tail = [line for line in out.read().splitlines() if line.strip()]
        why = ended or f"pytest exited {process.returncode} with no report: {one_line(tail[-1] if tail else '')}"
        return FileRun(tests={}, file_error=why, wall_s=wall_s)
    result = parse_junit(junit, module)
    result.wall_s = wall_s
    if ended and not result.file_error:
        result.file_error = ended
    return result


def _pytest_args(file: str) -> list[str]:
    # -p no:subtests: pytest 9's subtests (here) report as pytest 8 (the baseline's) does.
    args = ["-m", "pytest", file, "-q", "-p", "no:cacheprovider", "-p", "no:subtests", "--junitxml=junit.xml"]
    return args + ["-o", "junit_family=xunit1"]


def _environment(scratch: str) -> dict:
    """This process's environment less TF_CONFIG, with the scratch folder (the plugin) as the only PYTHONPATH."""
    with open(os.path.join(scratch, _PLUGIN_MODULE + ".py"), "w") as plugin:
        plugin.write(GRAPH_HALVES)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TF_CONFIG")}
    env["PYTHONPATH"] = scratch
    return env


def run_baseline(python: str, scratch: str, files: list[str], timeout_s: float, after_each=None) -> dict:
    """Each file on real TFRA, its graph halves (the plugin); ``after_each(results so far)`` after each file."""
    env = _environment(scratch)
    results = {}
    for file in files:
        module = file[:-3]
        command = [python, *_pytest_args(file), "-p", _PLUGIN_MODULE]
        results[module] = run_file(command, scratch, module, timeout_s, env)
        print(f"  baseline {module}: {_summary(results[module])}", flush=True)
        if after_each:
            after_each(results)
    return results


def run_here(scratch: str, files: list[str], timeout_s: float) -> dict[str, FileRun]:
    """Each file as ``python scripts/run_legacy.py -m pytest FILE`` (this interpreter), its graph halves."""
    env = _environment(scratch)
    timeout = ["--timeout", str(_TEST_TIMEOUT_S)] if _has_module("pytest_timeout") else []
    results = {}
    for file in files:
        module = file[:-3]
        run_legacy = os.path.join(REPO, "scripts", "run_legacy.py")
        command = [sys.executable, run_legacy, *_pytest_args(file), "-p", _PLUGIN_MODULE, *timeout]
        results[module] = run_file(command, scratch, module, timeout_s, env)
        print(f"  here {module}: {_summary(results[module])}", flush=True)
    return results


def _has_module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _summary(result: FileRun) -> str:
    counts: dict[str, int] = {}
    for outcome, _ in result.tests.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    text = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items())) or "no tests"
    return f"{text} in {result.wall_s:.0f} s" + (f" ({result.file_error})" if result.file_error else "")


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _read_baseline(path: str) -> tuple[dict, dict[str, FileRun]]:
    try:
        with open(path) as f:
            data = json.load(f)
        return data, {module: FileRun.from_json(run) for module, run in data["files"].items()}
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise UsageError(f"--baseline_json={path} is not a baseline report: {one_line(str(err))}") from None


def _baseline_report(python: str, paths: dict[str, str], results: dict[str, FileRun]) -> dict:
    versions = subprocess.run(
        [
            python,
            "-c",
            "import tensorflow as t, tensorflow_recommenders_addons as r; print(t.__version__, r.__version__)",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout.split()
    return {
        "system": BASELINE_NAME,
        "tensorflow": versions[0] if versions else "",
        "tfra": versions[1] if len(versions) > 1 else "",
        "env": BASELINE_ENV,
        "graph_mode": "tf.compat.v1.disable_v2_behavior(), and each test's graph half (benchmarks/tfra_tests.py)",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "files": {name[:-3]: {"sha256": _sha256(paths[name]), **results[name[:-3]].to_json()} for name in paths},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tfra_source", required=True, help="TFRA v0.7.2's source tree (its test files are read)")
    parser.add_argument("--files", default=",".join(FILES), help="comma-separated test files of kernel_tests/")
    parser.add_argument("--baseline_json", help="an earlier baseline report to compare with, instead of real TFRA")
    parser.add_argument("--save_baseline", help="write the baseline's report (JSON) here")
    parser.add_argument("--only_baseline", action="store_true", help="run real TFRA only")
    parser.add_argument("--out", help="write both runs and the rates (JSON) here")
    parser.add_argument("--file_timeout_s", type=float, default=2400.0, help="bound of one file's run")
    parser.add_argument("--keep_scratch", action="store_true", help="keep the copies, logs and JUnit files")
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except UsageError as err:
        print(f"tfra_tests.py: error: {err}", file=sys.stderr)
        return 2


def _run(args) -> int:
    names = [name.strip() for name in args.files.split(",") if name.strip()]
    paths = sources(args.tfra_source, names)
    if args.only_baseline and args.baseline_json:
        raise UsageError("--only_baseline runs real TFRA, --baseline_json reads an earlier run: pass one")
    scratch = tempfile.mkdtemp(prefix="tfra_tests_")
    try:
        for name, path in paths.items():
            shutil.copyfile(path, os.path.join(scratch, name))  # unchanged
        if args.baseline_json:
            report, baseline = _read_baseline(args.baseline_json)
        else:
            python, reason = tfra_env.ensure_env(BASELINE_ENV)
            print(f"baseline environment: {reason}", flush=True)
            if python is None:
                print(f"tfra_tests.py: no baseline: {reason}", file=sys.stderr)
                return 1

            def save(results):  # after each file, so a run cut short keeps the files it ran
                if args.save_baseline:
                    done = {name: path for name, path in paths.items() if name[:-3] in results}
                    with open(args.save_baseline, "w") as f:
                        json.dump(_baseline_report(python, done, results), f, indent=1, sort_keys=True)
                        f.write("\n")

            baseline = run_baseline(python, scratch, names, args.file_timeout_s, save)
            report = _baseline_report(python, paths, baseline)
        if args.only_baseline:
            return 0
        missing = [name for name in names if name[:-3] not in baseline]
        if missing:
            raise UsageError(f"--baseline_json={args.baseline_json} has no run of {', '.join(missing)}")
        for name in names:  # the baseline ran these very files
            ran = report["files"][name[:-3]].get("sha256")
            if ran and ran != _sha256(paths[name]):
                raise UsageError(f"{paths[name]} is not the file --baseline_json={args.baseline_json} ran (sha256)")
        here = run_here(scratch, names, args.file_timeout_s)
        rates = [compare(name[:-3], baseline[name[:-3]], here[name[:-3]]) for name in names]
        print(format_rates(rates, f"{report.get('system', BASELINE_NAME)}", HERE_NAME))
        if args.out:
            with open(args.out, "w") as f:
                json.dump(_comparison(report, here, rates), f, indent=1, sort_keys=True)
                f.write("\n")
        return 0
    finally:
        if args.keep_scratch:
            print(f"scratch kept: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


def _comparison(report: dict, here: dict[str, FileRun], rates) -> dict:
    total = sum(rate.baseline_passed for rate in rates)
    passed = sum(rate.passed_here for rate in rates)
    return {
        "baseline": report,
        "here": {"system": HERE_NAME, "files": {module: run.to_json() for module, run in here.items()}},
        "rates": {
            rate.module: {
                "baseline_passed": rate.baseline_passed,
                "passed_here": rate.passed_here,
                "rate": round(rate.rate, 4),
                "failures": dict(rate.failures),
            }
            for rate in rates
        },
        "overall": {
            "baseline_passed": total,
            "passed_here": passed,
            "rate": round(passed / total, 4) if total else 0.0,
        },
    }


if __name__ == "__main__":
    sys.exit(main())
