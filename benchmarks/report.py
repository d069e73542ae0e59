"""Writes the benchmark's results: results.json, a Markdown table and a PNG chart."""

from __future__ import annotations

import json
import os

from benchmarks.main_job import main_job_line
from benchmarks.systems import (
    RAW,
    SINGLE,
    SYSTEMS,
    TF2,
    TFRA_TF2_15,
    TOOLKIT,
    TOOLKIT_DYNAMIC,
    TOOLKIT_NEAR,
    TOOLKIT_TFRA,
)
from ps_toolkit.launch import charts

# What each system's ctr figures are set against (the targets): the dynamic tables against the
# fixed tables per field, the TFRA script on ps_toolkit against the same script on real TFRA.
CTR_REFERENCES = {TOOLKIT_DYNAMIC: (TOOLKIT, "per_field"), TOOLKIT_TFRA: (TFRA_TF2_15, None)}

RECORD_KEYS = (
    "system",
    "model",
    "mode",
    "num_ps",
    "num_workers",
    "steps_per_sec",
    "min",
    "max",
    "startup_s",
    "shutdown_s",
)


def write_json(records: list[dict], path: str, meta: dict) -> None:
    missing = [k for r in records for k in RECORD_KEYS if k not in r]
    if missing:
        raise ValueError(f"result records lack {sorted(set(missing))}")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump({"meta": meta, "results": records}, handle, indent=2)


def _key(record) -> tuple:
    return (record["model"], record["mode"], record["num_ps"], record["num_workers"])


def _find(records, system, model, mode, num_ps, num_workers):
    for r in records:
        if r["system"] == system and _key(r) == (model, mode, num_ps, num_workers):
            return r
    return None


def rate_cell(record) -> str:
    if record is None:
        return "-"
    return f"{record['steps_per_sec']:g} ({record['min']:g}-{record['max']:g})"


def _ratio(a, b) -> str:
    if a is None or b is None or not b["steps_per_sec"]:
        return "-"
    return f"{a['steps_per_sec'] / b['steps_per_sec']:.2f}x"


def _seconds(value) -> str:
    return "killed" if value is None else f"{value:.2f}"


def markdown_table(records: list[dict], main_job: dict | None = None) -> str:
    """Steps/s per configuration and system (median, min-max), ps_toolkit's ratios, startup and shutdown.

    ``main_job``: benchmarks.main_job.measure's figures, one line after the tables.
    """
    graphs = [r for r in records if r.get("measure") == "graph"]
    ctr = [r for r in records if r["model"] == "ctr" and r.get("measure") != "graph"]
    records = [r for r in records if r["model"] != "ctr"]
    systems = [s for s in SYSTEMS if s != SINGLE and any(r["system"] == s for r in records)]
    header = ["model", "mode", "ps+w", *systems, "toolkit/raw", "toolkit/tf2", "toolkit/single"]
    header += ["near/raw", "near/tf2", "near/single"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for key in sorted({_key(r) for r in records if r["system"] != SINGLE}, key=_order):
        model, mode, num_ps, num_workers = key
        row = {s: _find(records, s, *key) for s in systems}
        toolkit = row.get(TOOLKIT)
        single = _find(records, SINGLE, model, "async", 0, 1)
        cells = [model, mode, f"{num_ps}+{num_workers}", *(rate_cell(row[s]) for s in systems)]
        cells += [_ratio(toolkit, row.get(RAW)), _ratio(toolkit, row.get(TF2)), _ratio(toolkit, single)]
        near = row.get(TOOLKIT_NEAR)
        cells += [_ratio(near, row.get(RAW)), _ratio(near, row.get(TF2)), _ratio(near, single)]
        lines.append("| " + " | ".join(cells) + " |")
    singles = [r for r in records if r["system"] == SINGLE]
    if singles:
        lines += ["", "Single process, no servers: " + ", ".join(f"{r['model']} {rate_cell(r)}" for r in singles)]
    lines += ["", _timing_table(records), "", _startup_over_single(records)]
    if main_job:
        lines += ["", main_job_line(main_job)]
    if ctr:
        lines += ["", ctr_table(ctr)]
    if graphs:
        lines += ["", graph_table(graphs)]
    return "\n".join(lines) + "\n"


def ctr_table(records: list[dict]) -> str:
    """The ctr model: per id law, table layout and lever, each system's figures and ps_toolkit's ratios."""
    header = ["ids", "tables", "system", "lever", "steps/s (min-max)", "CPU ms/example", "bytes/step (x needed)"]
    header += ["AUC (after steps)", "last step to all exited, s", "toolkit/raw steps/s", "toolkit/raw CPU"]
    header += ["toolkit/tf2 steps/s", "against: steps/s, CPU"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]

    def peer(r, system, tables=None):
        for other in records:
            same = (other["ids"], other["tables"]) == (r["ids"], tables or r["tables"])
            if other["system"] == system and same and not other["variant"]:
                return other
        return None

    for r in sorted(records, key=lambda r: (r["tables"], r["ids"], SYSTEMS.index(r["system"]), r["variant"])):
        moved = (
            "-" if r["bytes_per_step"] is None else f"{r['bytes_per_step'] / 1e3:.0f} kB ({r['bytes_over_needed']}x)"
        )
        cells = [r["ids"], r["tables"], r["system"], r["variant"] or "-", rate_cell(r)]
        cells += [_number(r["cpu_ms_per_example"], 4), moved, f"{r['auc']} ({r['train_steps']})"]
        cells.append(_seconds(r["shutdown_s"]))
        raw, tf2 = peer(r, RAW), peer(r, TF2)
        mine = r["system"] == TOOLKIT
        cells += [_ratio(r, raw) if mine else "-", _cpu_ratio(r, raw) if mine else "-", _ratio(r, tf2) if mine else "-"]
        reference = CTR_REFERENCES.get(r["system"])
        against = peer(r, *reference) if reference else None
        cells.append(f"{against['system']} {_ratio(r, against)}, {_cpu_ratio(r, against)}" if against else "-")
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def graph_table(records: list[dict]) -> str:
    """The ctr model's training graphs: ops and build seconds per system, tables and fields, against the
    fixed tables' (ps_toolkit) at the same field count."""
    header = ["fields", "tables", "system", "graph ops", "build s (min-max)", "ops / fixed", "build / fixed"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]

    def fixed(r):
        for other in records:
            if other["system"] == TOOLKIT and other["fields"] == r["fields"] and other["tables"] == "per_field":
                return other
        return None

    def over(r, key):
        base = fixed(r)
        if r[key] is None or base is None or not base[key]:
            return "-"
        return f"{r[key] / base[key]:.2f}x"

    for r in sorted(records, key=lambda r: (r["fields"], r["tables"], SYSTEMS.index(r["system"]))):
        built = "-" if r["graph_build_s"] is None else f"{r['graph_build_s']:g}"
        if r["graph_build_s"] is not None:
            built += f" ({r['graph_build_s_min']:g}-{r['graph_build_s_max']:g})"
        ops = "-" if r["graph_ops"] is None else f"{r['graph_ops']:,}"
        cells = [r["fields"], r["tables"], r["system"], ops, built, over(r, "graph_ops"), over(r, "graph_build_s")]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def _cpu_ratio(a, b) -> str:
    if a is None or b is None or not a.get("cpu_ms_per_example") or not b.get("cpu_ms_per_example"):
        return "-"
    return f"{a['cpu_ms_per_example'] / b['cpu_ms_per_example']:.2f}x"


def _startup_over_single(records) -> str:
    """ps_toolkit's launch to first step (all replicas, async 1+2) beside the single process's start-up, per model."""
    cells = []
    for model in ("softmax", "mlp", "wide"):
        toolkit, single = _find(records, TOOLKIT, model, "async", 1, 2), _find(records, SINGLE, model, "async", 0, 1)
        if toolkit and single:
            over = toolkit["startup_s"] - single["startup_s"]
            cells.append(f"{model} {toolkit['startup_s']:.2f} s vs {single['startup_s']:.2f} s ({over:+.2f} s)")
    return "Start-up, ps_toolkit (async 1+2, all replicas) vs single process: " + ("; ".join(cells) or "-")


def _timing_table(records) -> str:
    header = ["system", "model", "mode", "ps+w", "launch to first step (all / any), s", "last step to all exited, s"]
    header += ["CPU ms/step (by task)", "MB/s moved", "accuracy"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in sorted(records, key=lambda r: (_order(_key(r)), SYSTEMS.index(r["system"]))):
        cells = [r["system"], r["model"], r["mode"], f"{r['num_ps']}+{r['num_workers']}"]
        cells += [f"{r['startup_s']:.1f} / {r.get('startup_first_s') or 0:.1f}", _seconds(r["shutdown_s"])]
        cells += [cpu_cell(r), f"{r.get('bandwidth_mb_s') or 0:g}", str(r.get("accuracy"))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cpu_cell(record) -> str:
    """All tasks' CPU ms per step, then each task's: '10.2 (ps0 3.1, worker0 3.6, worker1 3.5)'."""
    total = _number(record.get("cpu_ms_per_step"))
    by_task = record.get("cpu_ms_per_step_by_task")
    if not by_task:
        return total
    return f"{total} ({', '.join(f'{task} {_number(ms)}' for task, ms in by_task.items())})"


def _number(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _order(key):
    model, mode, num_ps, num_workers = key
    models = ("softmax", "mlp", "wide")
    return (models.index(model) if model in models else 9, mode, num_ps, num_workers)


def write_chart(records: list[dict], path: str) -> None:
    """Grouped bars: steps/s of each system per model (async, 1 ps + 2 workers), with min-max whiskers."""
    models = [m for m in ("softmax", "mlp", "wide") if any(r["model"] == m for r in records)]
    systems = [s for s in SYSTEMS if any(r["system"] == s for r in records)]
    figure = charts.new_figure((9, 4.5))
    axis = figure.subplots()
    width = 0.8 / max(len(systems), 1)
    for i, system in enumerate(systems):
        values, errors = [], [[], []]
        for model in models:
            r = (
                _find(records, system, model, "async", 0, 1)
                if system == SINGLE
                else _find(records, system, model, "async", 1, 2)
            )
            value = r["steps_per_sec"] if r else 0
            values.append(value)
            errors[0].append(value - r["min"] if r else 0)
            errors[1].append(r["max"] - value if r else 0)
        positions = [m + (i - (len(systems) - 1) / 2) * width for m in range(len(models))]
        axis.bar(positions, values, width, yerr=errors, capsize=2, label=system)
    axis.set_xticks(range(len(models)), models)
    axis.set_yscale("log")
    axis.set_ylabel("global steps/s (median, min-max)")
    axis.set_title("async, 1 ps + 2 workers (single process: no servers)")
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def write_all(records: list[dict], out_dir: str, meta: dict) -> dict:
    """Writes results.json, results.md and results.png into ``out_dir``; returns their paths."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {name: os.path.join(out_dir, f"results.{name}") for name in ("json", "md", "png")}
    write_json(records, paths["json"], meta)
    with open(paths["md"], "w", encoding="utf-8") as handle:
        handle.write(markdown_table(records, meta.get("main_job")))
    write_chart(records, paths["png"])
    return paths
