"""Measures ps_toolkit's levers one by one on one model (``python -m benchmarks.levers --out=DIR``).

Each variant is shipped ps_toolkit (scripts/run_task.py's defaults) with one
run_task.py flag changed, run side by side with the others (interleaved
repetitions), so the table shows what each lever buys or would buy.
"""

import json
import os

from absl import app, flags

from benchmarks import driver, report
from benchmarks.plan import CTR_DIM, CTR_VOCAB, EMBEDDING_TOPOLOGY, TRAIN_STEPS
from benchmarks.systems import ASYNC, CTR, RAW, TOOLKIT, TOOLKIT_1STEP, Config, CtrVariant

_OUT = flags.DEFINE_string("out", None, "Folder for levers.json and levers.md.", required=True)
_MODEL = flags.DEFINE_string("model", "mlp", "Model to measure the levers on.")
_REPETITIONS = flags.DEFINE_integer("repetitions", 3, "Runs per variant.")
_IDS = flags.DEFINE_string("ids", "zipf1.05", "ctr: the id law.")
_TABLES = flags.DEFINE_enum("tables", "per_field", ["per_field", "shared"], "ctr: a table per field, or one.")
_CTR_VOCAB = flags.DEFINE_integer("ctr_vocab", CTR_VOCAB, "ctr: ids per field.")

# (system, extra flags): each row changes one setting of the shipped defaults.
VARIANTS = (
    (RAW, ()),
    (TOOLKIT_1STEP, ()),  # --steps_per_run=1: no in-graph loop
    (TOOLKIT, ()),  # shipped: 20 steps per run
    (TOOLKIT, ("--steps_per_run=50",)),
    (TOOLKIT, ("--save_checkpoint_secs=60",)),  # checkpoints by time instead of every 100 steps
)


# The ctr model's levers (ps_toolkit.embedding_lookups and the loop), each turned off or on alone.
CTR_VARIANTS = (
    (RAW, ()),
    (TOOLKIT, ()),  # shipped: unique ids, one transfer per ps, 20 steps per run, float32
    (TOOLKIT, ("--nounique_ids",)),
    (TOOLKIT, ("--nogroup_lookups",)),
    (TOOLKIT, ("--nounique_ids", "--nogroup_lookups")),  # lookups as tf.nn.embedding_lookup makes them
    (TOOLKIT, ("--steps_per_run=1",)),
    (TOOLKIT, ("--wire_dtype=bfloat16",)),
)


def _configs() -> list[Config]:
    steps = TRAIN_STEPS[_MODEL.value]
    if _MODEL.value != CTR:
        return [Config(system, _MODEL.value, ASYNC, 1, 2, steps, extra) for system, extra in VARIANTS]
    variant = CtrVariant(_IDS.value, _TABLES.value, _CTR_VOCAB.value, CTR_DIM)
    return [Config(s, CTR, ASYNC, *EMBEDDING_TOPOLOGY, steps, extra, ctr=variant) for s, extra in CTR_VARIANTS]


def main(_):
    configs = _configs()
    limits = driver.Limits(repetitions=_REPETITIONS.value, budget_s=3600, count_loopback=_private_network())
    records = driver.run_plan(configs, limits)
    os.makedirs(_OUT.value, exist_ok=True)
    with open(os.path.join(_OUT.value, "levers.json"), "w", encoding="utf-8") as handle:
        json.dump(records, handle, indent=2)
    header = ["system", "lever", "steps/s (min-max)", "CPU ms/step (by task)", "launch to first step, s"]
    header += ["last step to exit, s", "AUC", "bytes per step / needed"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in records:
        cells = [r["system"], r["variant"] or "-", report.rate_cell(r), report.cpu_cell(r), r["startup_s"]]
        cells.append("killed" if r["shutdown_s"] is None else r["shutdown_s"])
        cells += [r.get("auc"), r.get("bytes_over_needed")]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(_OUT.value, "levers.md"), "w", encoding="utf-8") as handle:
        handle.write(text)
    print(text)


def _private_network() -> bool:
    """Whether this run's loopback is its own (a private network namespace), so bytes can be counted."""
    from ps_toolkit.network import netns

    try:
        netns.enter_private_network()
        return True
    except netns.NamespaceUnavailable:
        return False


if __name__ == "__main__":
    app.run(main)
