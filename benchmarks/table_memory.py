"""A dynamic table fed only new ids: the resident memory of its process, with its default bound and without.

    python -m benchmarks.table_memory [--ids=5000000] [--batch=50000] [--maintain_every=5] [--memory_mb=256]

One local shard (dim 8, float32, Adagrad: rows, meta and one slot), trained in a
plain session on batches of ids never seen before, its ``TableMaintenanceHook``
run every ``--maintain_every`` steps, as the chief runs it. Each bound runs in a
fresh subprocess (its memory is its own): ``default`` (no ``max_rows_per_shard``,
the process counting ``--memory_mb`` as its memory through PS_TOOLKIT_PS_MEMORY_MB)
and ``none`` (``max_rows_per_shard=0``). Prints one JSON line per maintenance run
(ids fed so far, rows, resident MB) and one summary line per bound.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np

PREFIX = "table_memory: "


def _rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def run_one(bound: str, ids: int, batch: int, maintain_every: int) -> None:
    """Feeds ``ids`` new ids in batches of ``batch``; prints a line per maintenance run and a summary."""
    import tensorflow as tf

    from ps_toolkit import dynamic_embedding as de

    graph = tf.Graph()
    with graph.as_default():
        step = tf.compat.v1.train.get_or_create_global_step()
        bounds = {"default": {}, "none": {"max_rows_per_shard": de.UNBOUNDED}}[bound]
        table = de.get_table("t", 8, **bounds)
        fed = tf.compat.v1.placeholder(tf.int64, [None])
        loss = tf.reduce_sum(tf.square(de.lookup(table, fed)))
        train = de.TableOptimizer(tf.compat.v1.train.AdagradOptimizer(0.1)).minimize(loss, global_step=step)
        hook = de.TableMaintenanceHook([table], every_steps=maintain_every)
        hook.begin()
        init = tf.compat.v1.global_variables_initializer()
    session = tf.compat.v1.Session(graph=graph)
    session.run(init)
    hook.after_create_session(session, None)
    start_mb = _rss_mb()
    samples = []
    for i in range(ids // batch):
        session.run(train, {fed: np.arange(i * batch, (i + 1) * batch, dtype=np.int64)})
        if (i + 1) % maintain_every == 0:
            hook.maintain(session)
            record = hook.result()["t"]
            samples.append({"ids_fed": (i + 1) * batch, "rows": record["rows"], "rss_mb": round(_rss_mb())})
            print(PREFIX + json.dumps({"bound": bound, **samples[-1]}), flush=True)
    half = samples[len(samples) // 2]
    summary = {
        "bound": bound,
        "max_rows_per_shard": hook.result()["t"]["max_rows_per_shard"],
        "rss_mb_start": round(start_mb),
        "rss_mb_half": half["rss_mb"],
        "rss_mb_end": samples[-1]["rss_mb"],
        "rss_mb_peak": max(s["rss_mb"] for s in samples),
        "rows_end": samples[-1]["rows"],
        "ids_fed": samples[-1]["ids_fed"],
    }
    print(PREFIX + json.dumps({"summary": summary}), flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ids", type=int, default=5_000_000)
    parser.add_argument("--batch", type=int, default=50_000)
    parser.add_argument("--maintain_every", type=int, default=5)
    parser.add_argument("--memory_mb", type=int, default=256)
    parser.add_argument("--bounds", default="default,none", help="which of default,none to run")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a subprocess's own bound
    args = parser.parse_args(argv)
    if args.one:
        run_one(args.one, args.ids, args.batch, args.maintain_every)
        return
    for bound in args.bounds.split(","):
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PS_TOOLKIT_PS_MEMORY_MB": str(args.memory_mb)}
        command = [sys.executable, "-m", "benchmarks.table_memory", f"--one={bound}", *(argv or sys.argv[1:])]
        subprocess.run(command, env=env, check=True, timeout=3600)


if __name__ == "__main__":
    main()
