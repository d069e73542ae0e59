"""Runs one tests/corpus case several times with CPU burners beside it and says how each run ended.

    python benchmarks/corpus_under_load.py --case=census_estimator --runs=5 --load_procs=6 --out=/tmp/census_load
    python benchmarks/corpus_under_load.py --case=census_estimator --evaluator --out=/tmp/census_eval_load

For each run: the machine's one-minute load average at its start and end, every task's exit status as
the launcher's summary.txt gives it, and the launcher's verdict line; a markdown table of them is
printed and written to OUT/results.md, each run's folder kept under OUT. Exit status 0 when every
task of every run ended ``0 (finished)``, 1 otherwise.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import sys
import time

from absl import app, flags

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from benchmarks.cpu_load import CpuLoad  # noqa: E402
from benchmarks.run_summary import FINISHED, task_ends  # noqa: E402
from ps_toolkit import cli  # noqa: E402

_CASE = flags.DEFINE_string("case", "census_estimator", "The tests/test_corpus.py case to run.")
_RUNS = flags.DEFINE_integer("runs", 5, "Runs, one after another.")
_LOAD_PROCS = flags.DEFINE_integer("load_procs", 6, "CPU burners beside the runs (one core each).")
_EVALUATOR = flags.DEFINE_boolean(
    "evaluator", False, "Add an evaluator task to the case's cluster (train_and_evaluate's evaluator)."
)
_OUT = flags.DEFINE_string("out", None, "Folder for each run's folder and results.md.", required=True)

_VERDICT = re.compile(r"^launcher: (succeeded|FAILED).*$", re.MULTILINE)


def _main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    import test_corpus  # tests/test_corpus.py: the cases and how the test runs one

    bad = None
    if _CASE.value not in test_corpus.CASES:
        bad = f"--case={_CASE.value}: not a case of tests/test_corpus.py ({', '.join(test_corpus.CASES)})"
    elif _RUNS.value < 1 or _LOAD_PROCS.value < 0:
        bad = f"--runs={_RUNS.value} must be positive and --load_procs={_LOAD_PROCS.value} 0 or more"
    if bad:
        sys.stderr.write(f"corpus_under_load.py: error: {bad}\n")
        return 2
    case, out = test_corpus.CASES[_CASE.value], pathlib.Path(_OUT.value)
    if _EVALUATOR.value:
        case = dataclasses.replace(case, cluster=[*case.cluster, "--evaluator"])
    rows, clean = [], 0
    with CpuLoad(_LOAD_PROCS.value):
        for index in range(1, _RUNS.value + 1):
            folder = out / f"run{index}"
            folder.mkdir(parents=True, exist_ok=False)
            load_before, started = os.getloadavg()[0], time.monotonic()
            proc = test_corpus.run_case(case, folder)
            seconds, load_after = time.monotonic() - started, os.getloadavg()[0]
            summary = folder / "run" / "summary.txt"
            ends = task_ends(summary.read_text(errors="replace")) if summary.exists() else {}
            verdict = _VERDICT.search(proc.stdout)
            ok = bool(ends) and all(end == FINISHED for end in ends.values()) and proc.returncode == 0
            clean += ok
            shown = ", ".join(f"{task} {end}" for task, end in ends.items()) or "no summary"
            said = verdict[0][:160] if verdict else f"exit {proc.returncode}, no verdict line"
            rows.append(f"| {index} | {load_before:.1f} / {load_after:.1f} | {seconds:.0f} | {shown} | {said} |")
            print(rows[-1], flush=True)
    table = ["| run | load average start / end | s | task ends | verdict |", "|---|---|---|---|---|", *rows]
    table.append(f"\n{clean} of {_RUNS.value} runs with every task {FINISHED}, {_LOAD_PROCS.value} burners beside.")
    (out / "results.md").write_text("\n".join(table) + "\n")
    print("\n".join(table))
    return 0 if clean == _RUNS.value else 1


def main() -> None:
    """The command: ``python benchmarks/corpus_under_load.py``."""
    cli.run_tool(_main, __name__)


if __name__ == "__main__":
    main()
