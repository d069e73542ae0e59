"""Runs a benchmark plan: repetitions interleaved across systems, within a time budget, into records."""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import tempfile
import time

from benchmarks import checkpoint_sizes, ctr_bytes, measure, systems
from benchmarks.cluster_run import ClusterRunError, run_cluster
from benchmarks.synthetic import MODELS, write_idx_dir
from ps_toolkit.launch.ports import reserve_ports

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Limits:
    repetitions: int = 3
    budget_s: float = 540.0  # no new repetition starts after this
    run_timeout_s: float = 300.0  # a loaded machine's start-ups alone took 100 s
    exit_grace_s: float = 10.0  # after training ends, a process still running this long is killed
    # After the first replica's ``done``, how long the others get to print theirs (training ends at the last).
    replica_end_s: float = 60.0
    measure_s: float = 4.0  # timing window of runs measured by time (the raw script)
    count_loopback: bool = False  # the runs' loopback carries only their own traffic (a private namespace)
    task_logs_dir: str | None = None  # each run's task logs are kept in a subfolder of this one


def run_plan(configs: list, limits: Limits) -> list[dict]:
    """Runs every config ``limits.repetitions`` times, round by round, and summarizes each.

    Round-robin order spreads the machine's noise over all systems alike.
    A round that would start after the budget is skipped (every config gets
    at least one run); each record says how many repetitions it has.
    """
    started = time.monotonic()
    runs = {c: [] for c in configs}
    failures = {c: [] for c in configs}
    data_dir = write_idx_dir(tempfile.mkdtemp(prefix="ps_toolkit_bench_data_"))
    try:
        for round_index in range(limits.repetitions):
            for config in configs:
                if round_index and time.monotonic() - started > limits.budget_s:
                    break
                _run_into(config, limits, data_dir, runs, failures)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    return [record(c, runs[c], failures[c]) for c in configs if runs[c]]


def _run_into(config, limits: Limits, data_dir: str, runs: dict, failures: dict) -> None:
    """One repetition of ``config``: its figures into ``runs``, or its failure's first line into ``failures``."""
    try:
        runs[config].append(run_once(config, limits, data_dir))
    except (ClusterRunError, ValueError) as err:
        log.warning("%s failed: %s", _label(config), str(err)[:2000])
        failures[config].append(str(err).splitlines()[0])
    if runs[config]:
        log.info("%s: %s", _label(config), dataclasses.asdict(runs[config][-1]))


def run_once(config: systems.Config, limits: Limits, data_dir: str) -> measure.RunFigures:
    checkpoint_dir = tempfile.mkdtemp(prefix="ps_toolkit_bench_")
    try:
        # Held until every process has ended. Released before the servers bind (as
        # it once was), a concurrent launch on this machine, such as another test
        # run, could take the same port, and gRPC's SO_REUSEPORT lets two servers share it.
        with reserve_ports(max(config.num_ports, 1)) as reservation:
            options = {
                "timeout_s": limits.run_timeout_s,
                "exit_grace_s": limits.exit_grace_s,
                "replica_end_s": limits.replica_end_s,
                "count_loopback": limits.count_loopback,
                "keep_logs_in": _run_logs_dir(limits.task_logs_dir, config),
            }
            options.update(systems.run_options(config, limits.measure_s))
            task_list = systems.tasks(config, list(reservation.ports), checkpoint_dir, data_dir)
            outcome = run_cluster(task_list, **options)
        sizes = {}
        if config.model == systems.CTR and config.system in systems.CTR_CHECKPOINT_SYSTEMS:
            sizes = checkpoint_sizes.measure(checkpoint_dir)
            log.info("%s: checkpoint sizes %s", _label(config), sizes)
        found = measure.figures(outcome)
        return dataclasses.replace(found, **sizes) if sizes else found
    finally:
        shutil.rmtree(checkpoint_dir, ignore_errors=True)


def _run_logs_dir(task_logs_dir: str | None, config: systems.Config) -> str | None:
    """A new folder under ``task_logs_dir`` named after the run's configuration and start time; None if not kept."""
    if task_logs_dir is None:
        return None
    os.makedirs(task_logs_dir, exist_ok=True)
    label = "".join(c if c.isalnum() or c in "._-" else "_" for c in _label(config))
    return tempfile.mkdtemp(prefix=f"{time.strftime('%H%M%S')}-{label}-", dir=task_logs_dir)


def record(config: systems.Config, runs: list, failures: list) -> dict:
    """One results.json record: the configuration, the summary, bytes and bandwidth."""
    summary = measure.summarize(runs)
    if config.model == systems.CTR:
        return ctr_record(config, summary, failures)
    spec = MODELS[config.model]
    moved = 0 if config.system == systems.SINGLE else spec.bytes_per_step
    return {
        "system": config.system,
        "model": config.model,
        "mode": config.mode,
        "num_ps": config.num_ps,
        "num_workers": config.num_workers,
        **summary,
        "variant": " ".join(config.extra_flags),
        "train_steps": config.train_steps,
        "bytes_per_step": moved,
        "bandwidth_mb_s": measure.bandwidth(summary["steps_per_sec"], moved),
        "failures": failures,
    }


def ctr_record(config: systems.Config, summary: dict, failures: list) -> dict:
    """A ctr record: the issue's names (ids, cpu_ms_per_example, measured bytes against the unique rows, auc)."""
    variant = config.ctr
    batch_size, _ = systems.batch_and_rate(config.model)
    cpu = summary["cpu_ms_per_step"]
    needed = ctr_bytes.needed_bytes_per_step(variant.ids, variant.vocab, variant.dim, batch_size)
    moved = summary.pop("measured_bytes_per_step")
    whole, delta = summary.pop("checkpoint_bytes"), summary.pop("delta_bytes")
    sizes = {
        "checkpoint_bytes": whole,
        # A delta checkpoint checkpoint_sizes.DELTA_AFTER_STEPS global steps after the whole one (dynamic tables).
        "delta_bytes_100": delta,
        "delta_steps": summary.pop("delta_steps"),
        "delta_over_checkpoint": round(delta / whole, 3) if delta and whole else None,
    }
    return {
        "system": config.system,
        "model": config.model,
        "ids": variant.ids,
        "tables": variant.tables,
        "fields": ctr_bytes.FIELDS,
        "mode": config.mode,
        "num_ps": config.num_ps,
        "num_workers": config.num_workers,
        **summary,
        "cpu_ms_per_example": None if cpu is None else round(cpu / batch_size, 4),
        "bytes_per_step": moved,
        **needed,
        "bytes_over_needed": None if moved is None else round(moved / needed["needed_bytes_per_step"], 3),
        **sizes,
        "variant": " ".join(config.extra_flags),
        "train_steps": config.train_steps,
        "failures": failures,
    }


def _label(config) -> str:
    extra = f" {' '.join(config.extra_flags)}" if config.extra_flags else ""
    extra += f" {config.ctr.ids} {config.ctr.tables}" if config.ctr else ""
    return f"{config.system}{extra} {config.model} {config.mode} {config.num_ps}ps+{config.num_workers}w"
