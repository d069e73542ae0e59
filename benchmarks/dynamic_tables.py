"""Measures core TensorFlow hash tables for dynamic embeddings on CPU: speed, memory, and the ps's peak during a save.

    python -m benchmarks.dynamic_tables [--rows=1000000] [--dim=32] [--repeats=5] [--slots=2] [--only_save]

Each measurement runs in a fresh subprocess (its memory is its own):
the shard's own table (``hash_tables.HashTable``, what ps_toolkit.dynamic_embedding
uses: a dense hash table keyed by [table tag, mixed id], the ids hashed in the
measured ops) beside core TensorFlow's ``MutableHashTable`` and ``DenseHashTable``
on plain ids: the seconds to insert ``rows`` rows, the median seconds of a lookup
of 65,536 ids (half known), the resident memory the filled table adds; then a
dynamic table of ``rows`` rows (one shard) saved by the tf.compat.v1 Saver (with
``--slots`` optimizer slots of as many rows): its resident memory before, and the
peak during, the save. Prints one JSON line per measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

LOOKUP_BATCH = 65_536


def _rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _reset_peak() -> bool:
    """Resets the kernel's peak resident memory of this process (VmHWM); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def _window_peak_mb() -> float:
    """The peak resident memory since the last ``_reset_peak`` (VmHWM)."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return _peak_mb()


def _table_speed(kind: str, rows: int, dim: int, repeats: int) -> dict:
    import numpy as np
    import tensorflow as tf

    ids = tf.constant(np.random.default_rng(0).permutation(2 * rows)[:rows].astype(np.int64) + 1)
    values = tf.random.stateless_normal([rows, dim], seed=[1, 2])
    if kind == "mutable":
        table = tf.lookup.experimental.MutableHashTable(tf.int64, tf.float32, tf.zeros([dim]))
    else:
        table = tf.lookup.experimental.DenseHashTable(
            tf.int64, tf.float32, tf.zeros([dim]), empty_key=-1, deleted_key=-2
        )
    before = _rss_mb()
    started = time.perf_counter()
    table.insert(ids, values)
    insert_seconds = time.perf_counter() - started
    table_mb = _rss_mb() - before
    queries = tf.constant(np.random.default_rng(1).integers(1, 2 * rows, LOOKUP_BATCH).astype(np.int64))
    table.lookup(queries)  # warm
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        table.lookup(queries).numpy()
        times.append(time.perf_counter() - started)
    return {
        "measure": f"{kind}_hash_table",
        "rows": rows,
        "dim": dim,
        "insert_seconds": round(insert_seconds, 3),
        "lookup_65536_median_ms": round(1000 * statistics.median(times), 2),
        "table_mb": round(table_mb, 1),
        "values_mb": round(rows * dim * 4 / 2**20, 1),
    }


def _shard_speed(rows: int, dim: int, repeats: int) -> dict:
    """The shard's own table, as a step reaches it: ids hashed to stored keys, then one insert or find."""
    import numpy as np
    import tensorflow as tf

    from ps_toolkit.dynamic_embedding import keys
    from ps_toolkit.dynamic_embedding.hash_tables import HashTable

    tag = keys.table_tag("benchmark")
    with tf.Graph().as_default() as graph:
        table = HashTable("benchmark/rows", tf.int64, tf.float32, dim, float("nan"), None)
        ids = tf.compat.v1.placeholder(tf.int64, [None])
        values = tf.compat.v1.placeholder(tf.float32, [None, dim])
        stored = keys.stored_keys(tf.int64, tag, ids, keys.hash64(ids))
        insert, find = table.insert(stored, values), table.find(stored)
        session = tf.compat.v1.Session(graph=graph)
    fill = np.random.default_rng(0).permutation(2 * rows)[:rows].astype(np.int64) + 1
    rows_values = np.random.default_rng(2).normal(size=(rows, dim)).astype(np.float32)
    before = _rss_mb()
    started = time.perf_counter()
    session.run(insert, {ids: fill, values: rows_values})
    insert_seconds = time.perf_counter() - started
    table_mb = _rss_mb() - before
    queries = np.random.default_rng(1).integers(1, 2 * rows, LOOKUP_BATCH).astype(np.int64)
    session.run(find, {ids: queries})  # warm
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        session.run(find, {ids: queries})
        times.append(time.perf_counter() - started)
    session.close()
    return {
        "measure": "shard_hash_table",
        "rows": rows,
        "dim": dim,
        "insert_seconds": round(insert_seconds, 3),
        "lookup_65536_median_ms": round(1000 * statistics.median(times), 2),
        "table_mb": round(table_mb, 1),
        "values_mb": round(rows * dim * 4 / 2**20, 1),
    }


def _save_peak(rows: int, dim: int, slots: int) -> dict:
    import numpy as np
    import tensorflow as tf

    from ps_toolkit import dynamic_embedding

    tf.compat.v1.disable_eager_execution()
    with tf.Graph().as_default():
        table = dynamic_embedding.get_table("bench", dim, devices=["/cpu:0"])
        shard = table.shards[0]
        ids = tf.compat.v1.placeholder(tf.int64, [None])
        rows_of_ids = tf.random.stateless_normal(tf.stack([tf.size(ids), dim]), seed=[1, 2])
        fill = [dynamic_embedding.table_ops.insert(table, ids, rows_of_ids)]
        # An optimizer's slots (Adam has two): each one more hash table of ``rows`` rows in the same shard.
        stored = dynamic_embedding.keys.stored_keys(tf.int64, table.tag, ids, dynamic_embedding.keys.hash64(ids))
        fill += [shard.slot(f"s{i}").insert(stored, tf.ones(tf.stack([tf.size(ids), dim]))) for i in range(slots)]
        saver = tf.compat.v1.train.Saver(sharded=True)
        with tf.compat.v1.Session() as session, tempfile.TemporaryDirectory() as folder:
            chunk = 250_000
            for start in range(0, rows, chunk):
                session.run(fill, {ids: np.arange(start, min(start + chunk, rows), dtype=np.int64) + 1})
            filled, peak_before = _rss_mb(), _peak_mb()
            # The fill's own temporaries peak too: the save's peak is read from a reset mark where the kernel has one.
            reset = _reset_peak()
            started = time.perf_counter()
            saver.save(session, os.path.join(folder, "model"))
            seconds = time.perf_counter() - started
            peak_after = _window_peak_mb() if reset else _peak_mb()
    return {
        "measure": "save_one_shard",
        "rows": rows,
        "dim": dim,
        "slots": slots,
        "rss_filled_mb": round(filled, 1),
        "peak_before_save_mb": round(peak_before, 1),
        "peak_during_save_mb": round(peak_after, 1),
        "save_seconds": round(seconds, 2),
        "values_mb": round(rows * dim * 4 / 2**20, 1),
        "added_by_save_mb": round(peak_after - filled, 1),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--slots", type=int, default=0, help="optimizer slots in the saved shard (Adam: 2)")
    parser.add_argument("--only_save", action="store_true", help="only the save measurement")
    parser.add_argument("--one", choices=["shard", "mutable", "dense", "save"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        if args.one == "save":
            record = _save_peak(args.rows, args.dim, args.slots)
        elif args.one == "shard":
            record = _shard_speed(args.rows, args.dim, args.repeats)
        else:
            record = _table_speed(args.one, args.rows, args.dim, args.repeats)
        print(json.dumps(record), flush=True)
        return
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    for one in ("save",) if args.only_save else ("shard", "mutable", "dense", "save"):
        command = [sys.executable, "-m", "benchmarks.dynamic_tables", f"--one={one}"]
        command += [f"--rows={args.rows}", f"--dim={args.dim}", f"--repeats={args.repeats}", f"--slots={args.slots}"]
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900, check=False)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        print(
            lines[-1] if done.returncode == 0 and lines else json.dumps({"measure": one, "error": done.stderr[-500:]})
        )


if __name__ == "__main__":
    main()
