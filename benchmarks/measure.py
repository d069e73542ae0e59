"""Turns one cluster run's marker lines and exit times into figures: steps/s, startup, shutdown."""

from __future__ import annotations

import dataclasses
import statistics

from benchmarks.cluster_run import ClusterOutcome


@dataclasses.dataclass(frozen=True)
class RunFigures:
    """What one repetition measured. Times in seconds; None where not observed."""

    steps_per_sec: float
    startup_s: float  # launch until every replica has run its first step
    shutdown_s: float | None  # last step until every process exited; None if one had to be killed
    killed: tuple[str, ...]  # tasks that did not exit by themselves within the grace period
    accuracy: float | None
    final_global_step: int | None
    # CPU milliseconds all tasks together spent per global step after warm-up:
    # less sensitive than steps/s to what else the machine is running.
    cpu_ms_per_step: float | None = None
    startup_first_s: float | None = None  # launch until the first step anywhere
    # The same per task (ps0, worker0, ...): where the CPU goes.
    cpu_ms_per_step_by_task: dict | None = None
    # Bytes all tasks sent each other per global step over the same window (a run counting loopback only).
    bytes_per_step: float | None = None
    auc: float | None = None  # the evaluation's ROC AUC, where a task printed one
    load_average: float | None = None  # the machine's one-minute load average as the run ended
    done_spread_s: float | None = None  # the first replica's last step until the last replica's (``done`` times)
    # ps_toolkit's ctr runs (benchmarks.checkpoint_sizes): a whole checkpoint, a delta of it, the steps between.
    checkpoint_bytes: int | None = None
    delta_bytes: int | None = None
    delta_steps: int | None = None


def figures(outcome: ClusterOutcome) -> RunFigures:
    """Aggregate global steps/s from the moment every replica is past warm-up to the first ``done``."""
    points = sorted(
        (
            (marker["time"], marker["global_step"], marker["event"], name, cpu, loopback)
            for name, r in outcome.results.items()
            for (marker, cpu), loopback in zip(r.cpu_samples, _loopback_or_none(r), strict=True)
            if marker["time"] is not None  # the ``done`` of a replica that ran no step
        ),
        key=lambda point: point[0],
    )
    loopback_at = {(p[0], p[3]): p[5] for p in points}
    points = [p[:5] for p in points]
    replicas = {name for name, r in outcome.results.items() if r.markers}
    firsts = {name: t for t, _, event, name, _ in points if event == "first_step"}
    warm = {name: (t, step, cpu) for t, step, event, name, cpu in points if event == "warm"}
    if not firsts or replicas - set(firsts) or set(firsts) - set(warm):
        who = _late_joiners(replicas, firsts, warm)
        raise ValueError(f"a replica never got past warm-up ({who}):\n" + outcome.describe())
    start_t, start_step, start_cpu = max(warm.values(), key=lambda p: p[0])
    dones = [p for p in points if p[2] == "done"]
    late = [p for p in points if p[0] > start_t and p[2] in ("tick", "done")]
    end = dones[0] if dones else (late[-1] if late else None)
    if end is None or end[0] <= start_t:
        # A replica that starts after another has finished (a slow start on a
        # loaded machine, a run too short): no window has every replica training.
        raise ValueError("the replicas never trained together past warm-up; run more steps:\n" + outcome.describe())
    end_t, end_step, _, _, _ = end
    # A task that exits right after its last marker may be gone when that line
    # is read: take CPU at the last point where every task was still sampled.
    cpu_points = [p for p in points if start_t < p[0] <= end_t and not set(start_cpu) - set(p[4])]
    killed = tuple(name for name, r in outcome.results.items() if r.killed)
    last_step = max((p[0] for p in dones), default=None)
    exits = [r.exited_at for r in outcome.results.values()]
    accuracies = [r.markers[-1].get("accuracy") for r in outcome.results.values() if r.markers]
    accuracies = [a for a in accuracies if a is not None]
    aucs = [m["auc"] for r in outcome.results.values() for m in r.markers if m.get("auc") is not None]
    moved = _bytes_per_step(points, loopback_at, start_t, start_step, end_t)
    by_task = _cpu_ms_by_task(start_cpu, cpu_points[-1][4], cpu_points[-1][1] - start_step) if cpu_points else None
    return RunFigures(
        steps_per_sec=(end_step - start_step) / max(end_t - start_t, 1e-9),
        startup_s=max(firsts.values()) - outcome.launched_at,
        shutdown_s=None if killed or last_step is None else max(exits) - last_step,
        killed=killed,
        accuracy=max(accuracies) if accuracies else None,
        final_global_step=max((p[1] for p in dones), default=None),
        cpu_ms_per_step=sum(by_task.values()) if by_task else None,
        startup_first_s=min(firsts.values()) - outcome.launched_at,
        cpu_ms_per_step_by_task=by_task,
        bytes_per_step=moved,
        auc=aucs[-1] if aucs else None,
        load_average=outcome.load_average,
        done_spread_s=max(p[0] for p in dones) - min(p[0] for p in dones) if dones else None,
    )


def _loopback_or_none(result) -> list:
    """The loopback byte counts at each marker, or None for each where none were counted."""
    samples = result.loopback_samples
    return samples if len(samples) == len(result.cpu_samples) else [None] * len(result.cpu_samples)


def _bytes_per_step(points, loopback_at: dict, start_t: float, start_step: int, end_t: float) -> float | None:
    """Loopback bytes per global step from the window's start to its last tick (printed while training:
    a ``done`` line comes after the final evaluation, whose reads are not a step's)."""
    start = next((p for p in points if p[0] == start_t and p[2] == "warm"), None)
    ticks = [p for p in points if p[2] == "tick" and start_t < p[0] <= end_t and p[1] > start_step]
    if start is None or not ticks:
        return None
    first, last = loopback_at.get((start[0], start[3])), loopback_at.get((ticks[-1][0], ticks[-1][3]))
    if first is None or last is None:
        return None
    return (last - first) / (ticks[-1][1] - start_step)


def _late_joiners(replicas, firsts, warm) -> str:
    no_step = sorted(replicas - set(firsts))
    not_warm = sorted(set(firsts) - set(warm))
    return f"no step: {', '.join(no_step) or '-'}; not past warm-up: {', '.join(not_warm) or '-'}"


def _cpu_ms_by_task(before: dict, after: dict, steps: int) -> dict | None:
    if steps <= 0 or set(before) - set(after):
        return None
    return {task: 1000 * (after[task] - before[task]) / steps for task in sorted(before)}


def summarize(runs: list[RunFigures]) -> dict:
    """Median, min and max over repetitions; startup/shutdown as medians."""
    rates = [r.steps_per_sec for r in runs]
    shutdowns = [r.shutdown_s for r in runs if r.shutdown_s is not None]
    accuracies = [r.accuracy for r in runs if r.accuracy is not None]
    return {
        "steps_per_sec": round(statistics.median(rates), 1),
        "min": round(min(rates), 1),
        "max": round(max(rates), 1),
        "startup_s": round(statistics.median(r.startup_s for r in runs), 2),
        "startup_first_s": _median_or_none([r.startup_first_s for r in runs], 2),
        "shutdown_s": round(statistics.median(shutdowns), 2) if len(shutdowns) == len(runs) else None,
        "killed_at_exit": sorted({name for r in runs for name in r.killed}),
        "accuracy": round(statistics.median(accuracies), 4) if accuracies else None,
        "cpu_ms_per_step": _median_or_none([r.cpu_ms_per_step for r in runs], 3),
        "cpu_ms_per_step_by_task": _median_by_task([r.cpu_ms_per_step_by_task for r in runs]),
        "measured_bytes_per_step": _median_or_none([r.bytes_per_step for r in runs], 0),
        "auc": _median_or_none([r.auc for r in runs], 4),
        "load_average": _min_max([r.load_average for r in runs]),
        "done_spread_s": _min_max([None if r.done_spread_s is None else round(r.done_spread_s, 2) for r in runs]),
        "checkpoint_bytes": _median_or_none([r.checkpoint_bytes for r in runs], 0),
        "delta_bytes": _median_or_none([r.delta_bytes for r in runs], 0),
        "delta_steps": _median_or_none([r.delta_steps for r in runs], 0),
        "repetitions": len(runs),
    }


def _median_by_task(per_run: list) -> dict | None:
    per_run = [r for r in per_run if r]
    tasks = sorted({task for r in per_run for task in r})
    return {task: _median_or_none([r.get(task) for r in per_run], 2) for task in tasks} or None


def _min_max(values) -> list | None:
    values = [v for v in values if v is not None]
    return [min(values), max(values)] if values else None


def _median_or_none(values, digits):
    values = [v for v in values if v is not None]
    return round(statistics.median(values), digits) if values else None


def bandwidth(steps_per_sec: float, bytes_per_step: int) -> float:
    """Achieved loopback bandwidth in MB/s: parameters pulled plus gradients pushed."""
    return round(steps_per_sec * bytes_per_step / 1e6, 1)
