"""Measures ps_toolkit's levers one by one on one model (``python -m ps_toolkit.benchmarks.levers --out=DIR``).

Each variant is shipped ps_toolkit (scripts/run_task.py's defaults) with one
run_task.py flag changed, run side by side with the others (interleaved
repetitions), so the table shows what each lever buys or would buy.
"""

import json
import os

from absl import app, flags

from ps_toolkit.benchmarks import driver, report
from ps_toolkit.benchmarks.plan import TRAIN_STEPS
from ps_toolkit.benchmarks.systems import ASYNC, RAW, TOOLKIT, TOOLKIT_1STEP, Config

_OUT = flags.DEFINE_string("out", None, "Folder for levers.json and levers.md.", required=True)
_MODEL = flags.DEFINE_string("model", "mlp", "Model to measure the levers on.")
_REPETITIONS = flags.DEFINE_integer("repetitions", 3, "Runs per variant.")

# (system, extra flags): each row changes one setting of the shipped defaults.
VARIANTS = (
    (RAW, ()),
    (TOOLKIT_1STEP, ()),  # --steps_per_run=1: no in-graph loop
    (TOOLKIT, ()),  # shipped: 20 steps per run
    (TOOLKIT, ("--steps_per_run=50",)),
    (TOOLKIT, ("--save_checkpoint_secs=60",)),  # checkpoints by time instead of every 100 steps
)


def main(_):
    steps = TRAIN_STEPS[_MODEL.value]
    configs = [Config(system, _MODEL.value, ASYNC, 1, 2, steps, extra) for system, extra in VARIANTS]
    records = driver.run_plan(configs, driver.Limits(repetitions=_REPETITIONS.value, budget_s=3600))
    os.makedirs(_OUT.value, exist_ok=True)
    with open(os.path.join(_OUT.value, "levers.json"), "w", encoding="utf-8") as handle:
        json.dump(records, handle, indent=2)
    header = ["system", "lever", "steps/s (min-max)", "CPU ms/step (by task)", "launch to first step, s"]
    header.append("last step to exit, s")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in records:
        cells = [r["system"], r["variant"] or "-", report.rate_cell(r), report.cpu_cell(r), r["startup_s"]]
        cells.append("killed" if r["shutdown_s"] is None else r["shutdown_s"])
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(_OUT.value, "levers.md"), "w", encoding="utf-8") as handle:
        handle.write(text)
    print(text)


if __name__ == "__main__":
    app.run(main)
