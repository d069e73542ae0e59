"""Measures ``dynamic_embedding.conversion.convert`` on a ctr-shaped fixed checkpoint: seconds and peak memory.

    python -m benchmarks.convert_embeddings [--tables=26] [--rows=100000] [--dim=8] [--parts=2] [--slots=1]

Writes a TF1 checkpoint of ``tables`` fixed tables ``model/embeddings_F`` of ``rows`` x ``dim``
float32, each split into ``parts`` partitions (saved by the Saver, whole) with ``slots`` Adagrad
slot(s), and a small dense layer; then converts every table with the identity mapping (every row
written) and prints one JSON line: the seconds the conversion took, the process's resident memory
before and at its peak, the rows written and the sizes of both checkpoints.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time


def _rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _folder_mb(folder: str) -> float:
    return sum(os.path.getsize(os.path.join(folder, name)) for name in os.listdir(folder)) / 2**20


def _fixed_checkpoint(folder: str, tables: int, rows: int, dim: int, parts: int, slots: int) -> None:
    import tensorflow as tf

    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        partitioner = tf.compat.v1.fixed_size_partitioner(parts)
        with tf.compat.v1.variable_scope("model"):
            made = [
                tf.compat.v1.get_variable(f"embeddings_{f}", [rows, dim], partitioner=partitioner)
                for f in range(tables)
            ]
            tf.compat.v1.get_variable("logit/kernel", [tables * dim, 1])
        if slots:
            loss = tf.add_n([tf.reduce_sum(tf.nn.embedding_lookup(table, [0])) for table in made])
            tf.compat.v1.train.AdagradOptimizer(0.1).minimize(loss, tf.compat.v1.train.get_or_create_global_step())
        session.run(tf.compat.v1.global_variables_initializer())
        tf.compat.v1.train.Saver().save(session, os.path.join(folder, "model.ckpt"), global_step=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=26)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=8)
    parser.add_argument("--parts", type=int, default=2)
    parser.add_argument("--slots", type=int, default=1, choices=(0, 1), help="1: Adagrad's accumulator")
    args = parser.parse_args()
    from ps_toolkit.dynamic_embedding import conversion, id_mappings

    with tempfile.TemporaryDirectory() as root:
        fixed, output = os.path.join(root, "fixed"), os.path.join(root, "dynamic")
        _fixed_checkpoint(fixed, args.tables, args.rows, args.dim, args.parts, args.slots)
        before = _rss_mb()
        started = time.perf_counter()
        spec = conversion.TableConversion("model/embeddings_*", id_mappings.identity())
        report = conversion.convert(fixed, output, [spec])
        seconds = time.perf_counter() - started
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        result = {
            "tables": args.tables,
            "rows_per_table": args.rows,
            "dim": args.dim,
            "parts": args.parts,
            "optimizer": report.optimizer,
            "rows_written": sum(len(table.placement.ids) for table in report.tables),
            "seconds": round(seconds, 2),
            "rss_before_mb": round(before),
            "peak_rss_mb": round(peak),
            "fixed_checkpoint_mb": round(_folder_mb(fixed)),
            "dynamic_checkpoint_mb": round(_folder_mb(output)),
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
