"""Benchmarks ps_toolkit against a raw TF1 between-graph script, TF2's ParameterServerStrategy and one process.

    python scripts/benchmark.py --quick --out=/tmp/bench     # the targets' configurations, one round
    python scripts/benchmark.py --out=/tmp/bench             # every model x topology x mode

Writes OUT/results.json, OUT/results.md and OUT/results.png (docs/performance.md
explains the figures). Every process it starts is ended before it returns.
"""

import json
import os
import platform
import time

from absl import app, flags, logging

from benchmarks import cpu_load, graph_size, plan, report, systems, tfra_systems
from benchmarks.driver import Limits, run_plan
from ps_toolkit import cli

_OUT = flags.DEFINE_string("out", None, "Folder for results.json, results.md and results.png.", required=True)
_QUICK = flags.DEFINE_boolean("quick", False, "Only the configurations the targets are stated for.")
_REPETITIONS = flags.DEFINE_integer("repetitions", 3, "Runs per configuration (median, min, max).")
_BUDGET = flags.DEFINE_float("budget_s", None, "No new round of repetitions after this; default 480 s with --quick.")
_MODELS = flags.DEFINE_list("models", list(plan.MODEL_NAMES), "Models to benchmark.")
_SYSTEMS = flags.DEFINE_list("systems", list(systems.SYSTEMS), "Systems to benchmark.")
_STEPS_SCALE = flags.DEFINE_float("steps_scale", 1.0, "Multiplies every run's global steps.")
_MAIN_JOB = flags.DEFINE_integer(
    "main_job_repetitions",
    None,
    "Runs of the main job (launch_local.py) per start method, fork and exec side by side (default --repetitions).",
)
_MEASURE_S = flags.DEFINE_float("measure_s", 4.0, "Timing window of the runs measured by time (the raw script).")
_CTR_VOCAB = flags.DEFINE_integer("ctr_vocab", plan.CTR_VOCAB, "The ctr model's ids per field.")
_CTR_DIM = flags.DEFINE_integer("ctr_dim", plan.CTR_DIM, "The ctr model's embedding width.")
_CTR_LEVERS = flags.DEFINE_boolean(
    "ctr_levers", False, "Also ps_toolkit on the ctr model with each of its levers changed alone (zipf1.05)."
)
_CTR_LAWS = flags.DEFINE_list("ctr_laws", list(plan.CTR_LAWS), "The ctr model's id laws to run.")
_CTR_TF2_UNIFORM = flags.DEFINE_boolean("ctr_tf2_uniform", True, "TF2's strategy on the ctr model's uniform ids too.")
_CTR_GRAPHS = flags.DEFINE_boolean(
    "ctr_graphs",
    True,
    "With the ctr model: also size and time each system's training graph (26 fields and 200), built alone.",
)
_RUN_TIMEOUT = flags.DEFINE_float(
    "run_timeout_s", Limits.run_timeout_s, "The bound on one run, start-ups included (a 26-table graph builds slowly)."
)
_GRAPH_TIMEOUT = flags.DEFINE_float("graph_timeout_s", 900.0, "The bound on one graph build (--ctr_graphs).")
_TFRA_PYTHON = flags.DEFINE_string(
    "tfra_python",
    None,
    "The python of a virtual environment with TF 2.15.1 and tensorflow-recommenders-addons 0.7.2 (tfra_tf2_15); "
    "default: the one benchmarks/tfra_env.py makes.",
)
_LOAD_PROCS = flags.DEFINE_integer(
    "load_procs",
    0,
    "CPU burners (one core each) the benchmark runs beside every run and ends before it returns: "
    "figures under load (each record's load_average says what the machine's was).",
)
_TASK_LOGS = flags.DEFINE_string(
    "task_logs",
    None,
    "Keep each run's task logs (stderr) in a subfolder of this folder, to diagnose a figure.",
)


def _main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    unknown = set(_MODELS.value) - set(plan.MODEL_NAMES) or set(_SYSTEMS.value) - set(systems.SYSTEMS)
    if unknown:
        raise app.UsageError(f"unknown --models/--systems {sorted(unknown)}")
    if set(_CTR_LAWS.value) - set(plan.CTR_LAWS):
        raise app.UsageError(f"unknown --ctr_laws {sorted(set(_CTR_LAWS.value) - set(plan.CTR_LAWS))}")
    if _LOAD_PROCS.value < 0:
        raise app.UsageError(f"--load_procs={_LOAD_PROCS.value} must be 0 or more")
    for name, flag in (("ctr_vocab", _CTR_VOCAB), ("ctr_dim", _CTR_DIM)):
        if flag.value < 1:
            raise app.UsageError(f"--{name}={flag.value} must be positive")
    for name, flag in (("run_timeout_s", _RUN_TIMEOUT), ("graph_timeout_s", _GRAPH_TIMEOUT)):
        if flag.value <= 0:
            raise app.UsageError(f"--{name}={flag.value} must be positive")
    make = plan.quick if _QUICK.value else plan.full
    models, sizes = tuple(_MODELS.value), (_CTR_VOCAB.value, _CTR_DIM.value)
    configs = [c for c in make(models, _STEPS_SCALE.value, sizes, _CTR_LEVERS.value) if c.system in _SYSTEMS.value]
    configs = [c for c in configs if c.ctr is None or c.ctr.ids in _CTR_LAWS.value]
    if not _CTR_TF2_UNIFORM.value:  # the targets at uniform ids are against the raw script only
        configs = [c for c in configs if not (c.ctr and c.system == systems.TF2 and c.ctr.ids == "uniform")]
    graphs = plan.graph_configs(*sizes) if systems.CTR in models and _CTR_GRAPHS.value else []
    graphs = [g for g in graphs if g.system in _SYSTEMS.value]
    configs, graphs, skipped, tfra_python = tfra_systems.with_real_tfra(configs, graphs, _TFRA_PYTHON.value)
    budget = _BUDGET.value if _BUDGET.value is not None else (480.0 if _QUICK.value else 3 * 3600.0)
    started = time.monotonic()
    network = _private_network()
    limits = Limits(
        repetitions=_REPETITIONS.value,
        budget_s=budget,
        measure_s=_MEASURE_S.value,
        run_timeout_s=_RUN_TIMEOUT.value,
        count_loopback=network is not None,
        task_logs_dir=_TASK_LOGS.value,
    )
    with cpu_load.CpuLoad(_LOAD_PROCS.value):
        records = run_plan(configs, limits)
        graph_records = [graph_size.measure(g, _REPETITIONS.value, _GRAPH_TIMEOUT.value, tfra_python) for g in graphs]
    records = graph_size.with_graph_figures(records, graph_records)
    from benchmarks import main_job
    from benchmarks.balance import balance_table

    main_job_runs = _REPETITIONS.value if _MAIN_JOB.value is None else _MAIN_JOB.value

    meta = {
        "quick": _QUICK.value,
        "skipped": skipped,
        "network": network or "the host's (no private namespace: bytes per step not measured)",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end",
        "load_procs": _LOAD_PROCS.value,
        "seconds": round(time.monotonic() - started, 1),
        "placement_balance_2ps": balance_table(_MODELS.value),
        "main_job": main_job.measure(main_job_runs) if main_job_runs > 0 else None,
    }
    meta["seconds"] = round(time.monotonic() - started, 1)
    paths = report.write_all(records, _OUT.value, meta)
    print(report.markdown_table(records, meta["main_job"]))
    print(json.dumps({"written": paths, "seconds": meta["seconds"]}))
    logging.info("benchmark done in %.0f s", meta["seconds"])


def _private_network() -> str | None:
    """Moves this process (and so every task it starts) into a private network namespace, so that its
    loopback carries only the benchmark's own traffic: bytes per step are counted there. None where
    no namespace can be made (then they are not measured)."""
    from ps_toolkit.network import netns

    try:
        return netns.enter_private_network()
    except netns.NamespaceUnavailable as err:
        logging.warning("bytes per step not measured: %s", err)
        return None


def main() -> None:
    """The benchmark's command: ``python scripts/benchmark.py``."""
    cli.run_tool(_main, __name__)


if __name__ == "__main__":
    main()
