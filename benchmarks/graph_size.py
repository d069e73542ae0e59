"""A ctr model's training graph, as each system builds it: its op count and the seconds to build it.

    python -m benchmarks.graph_size --system=ps_toolkit_dynamic --fields=200 --vocab=10000

The training graph and its Saver in one process, no session, no server, 2 ps
devices (the benchmark's ctr topology, 2 ps + 2 workers, as worker 0, the chief):
ps_toolkit's through ``replica_graph.build`` from run_task.py's flags as the
benchmark passes them, the raw TF1 script's through its own ``build_graph``. The TFRA
systems' script (benchmarks/tfra_ctr.py) measures itself with ``--graph_only``
(``tfra_systems.graph_command``). A graph with dynamic tables also counts the ops
the chief's table maintenance adds when its session starts (``maintenance_ops``:
run on their own schedule, never in a step). Each build runs in a fresh process, so that one
build's imports and caches do not speed up the next; ``measure`` runs
``repetitions`` of them and keeps the median. Prints one JSON line per build.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time

from benchmarks import CHECKOUT, systems, tfra_systems
from benchmarks.ctr_bytes import FIELDS
from ps_toolkit.base.paths import PACKAGE_PARENT

# The 200-field model's fields are small: its figures are about the graph, which the vocabulary does not change.
MANY_FIELDS, MANY_FIELDS_VOCAB = 200, 10_000
GRAPH_PREFIX = "graph_size: "
# The systems this module builds a graph for in its own process (the TFRA script builds its own).
BUILT_HERE = (systems.TOOLKIT, systems.TOOLKIT_DYNAMIC, systems.RAW)
_CLUSTER = {"ps": ["ps0:2222", "ps1:2222"], "worker": ["worker0:2222", "worker1:2222"]}


@dataclasses.dataclass(frozen=True)
class GraphConfig:
    """One graph measured: a system's ctr model with ``fields`` fields, a table per field or one shared."""

    system: str
    fields: int
    tables: str = "per_field"
    vocab: int = 1_000_000
    dim: int = 8


def build_command(config: GraphConfig, python: str = sys.executable) -> list[str]:
    """The argv of one build of ``config`` by this module (systems in ``BUILT_HERE``)."""
    return [
        python,
        "-m",
        "benchmarks.graph_size",
        f"--system={config.system}",
        f"--fields={config.fields}",
        f"--tables={config.tables}",
        f"--vocab={config.vocab}",
        f"--dim={config.dim}",
    ]


def parse_build_line(stdout: str) -> dict | None:
    """{"graph_ops", "graph_build_s"} from a build's stdout; None when it printed none."""
    lines = [line for line in stdout.splitlines() if line.startswith(GRAPH_PREFIX)]
    return json.loads(lines[-1][len(GRAPH_PREFIX) :]) if lines else None


def run_builds(command: list[str], repetitions: int, timeout_s: float, env: dict | None = None) -> tuple[list, list]:
    """(figures of each build that printed them, the first line of each failure): ``repetitions`` fresh processes."""
    base = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": os.pathsep.join((CHECKOUT, PACKAGE_PARENT))}
    builds, failures = [], []
    for _ in range(repetitions):
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                env={**base, **(env or {})},
                cwd=CHECKOUT,
                check=False,
            )
        except subprocess.TimeoutExpired:
            failures.append(f"no graph after {timeout_s:.0f} s")
            continue
        figures = parse_build_line(done.stdout) if done.returncode == 0 else None
        if figures is None:
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            failures.append(f"exit {done.returncode}: {tail[:300]}")
        else:
            builds.append(figures)
    return builds, failures


def measure(config: GraphConfig, repetitions: int, timeout_s: float, tfra_python: str | None = None) -> dict:
    """The graph record of ``config``: ``repetitions`` builds, each in a fresh process of its system's stack."""
    if config.system in BUILT_HERE:
        command = build_command(config)
    else:
        command = tfra_systems.graph_command(config.system, config.fields, config.vocab, config.dim, tfra_python)
    return graph_record(config, *run_builds(command, repetitions, timeout_s))


def with_graph_figures(records: list[dict], graphs: list[dict]) -> list[dict]:
    """The ctr training records with the graph figures of their system and tables at their field count
    (None for a system that builds no TF1 graph: TF2's strategy), then the graph records themselves."""
    by_key = {(g["system"], g["tables"], g["fields"]): g for g in graphs}
    result = []
    for r in records:
        if r["model"] == systems.CTR:
            graph = by_key.get((r["system"], r["tables"], r.get("fields", FIELDS))) or {}
            r = {**r, "graph_ops": graph.get("graph_ops"), "graph_build_s": graph.get("graph_build_s")}
        result.append(r)
    return result + graphs


def graph_record(config: GraphConfig, builds: list, failures: list) -> dict:
    """One results.json record of a graph measurement: median build seconds (min-max) and the op count."""
    seconds = [b["graph_build_s"] for b in builds]
    return {
        "system": config.system,
        "model": systems.CTR,
        "measure": "graph",
        "tables": config.tables,
        "fields": config.fields,
        "vocab": config.vocab,
        "dim": config.dim,
        # report.RECORD_KEYS of a training run: none here (no session runs).
        "mode": systems.ASYNC,
        "num_ps": 2,
        "num_workers": 2,
        "steps_per_sec": None,
        "min": None,
        "max": None,
        "startup_s": None,
        "shutdown_s": None,
        "graph_ops": builds[0]["graph_ops"] if builds else None,
        "graph_build_s": round(statistics.median(seconds), 2) if seconds else None,
        "graph_build_s_min": round(min(seconds), 2) if seconds else None,
        "graph_build_s_max": round(max(seconds), 2) if seconds else None,
        "repetitions": len(builds),
        "failures": failures,
    }


def _toolkit_graph(config: GraphConfig):
    """A function that builds ps_toolkit's training graph of the ctr model (``replica_graph.build``), as
    run_task.py builds it."""
    from absl import flags

    from benchmarks import ctr_model
    from ps_toolkit import cli
    from ps_toolkit.cluster.config import ClusterConfig
    from ps_toolkit.training import replica_graph
    from ps_toolkit.training.model_api import ModelDefinition

    cli.define_training_flags()
    batch_size, learning_rate = systems.batch_and_rate(systems.CTR)
    # The flags systems.tasks gives run_task.py for the ctr model (its checkpoint and evaluation policy).
    flags.FLAGS(
        [
            "graph_size",
            "--optimizer=sgd",
            f"--batch_size={batch_size}",
            f"--learning_rate={learning_rate}",
            "--save_checkpoint_secs=600",
            "--final_evaluation=chief",
            *systems.TOOLKIT_FLAGS[config.system],
        ]
    )
    train_config = cli.train_config_from_flags()
    params = {"tables": config.tables, "vocab": config.vocab, "dim": config.dim, "fields": config.fields}
    if config.system == systems.TOOLKIT_DYNAMIC:
        params["dynamic"] = True
    definition = ModelDefinition(ctr_model.model_fn, graph_input_fn, ctr_model.eval_input_fn, params, "ctr")
    cluster = ClusterConfig(jobs={k: tuple(v) for k, v in _CLUSTER.items()}, task_type="worker", task_index=0)
    return lambda: replica_graph.build(cluster, train_config, definition)


def _raw_graph(config: GraphConfig):
    """A function that builds the raw TF1 script's training graph and the Saver its MonitoredTrainingSession makes."""
    import tensorflow as tf
    from absl import flags

    from benchmarks import ctr_data, raw_tf1_ctr

    shape = ctr_data.CtrShape(vocab=config.vocab, dim=config.dim)
    flags.FLAGS(["graph_size"])  # the raw script's flags (benchmarks.task_flags) at their defaults: async

    def build():
        dataset = graph_input_fn(None, {"fields": config.fields})
        raw_tf1_ctr.build_graph(tf.train.ClusterSpec(_CLUSTER), 0, dataset, config.tables == "shared", shape)
        tf.compat.v1.train.Saver(sharded=True)

    return build


def graph_input_fn(input_context, params):
    """Batches of the ctr model's features with ``params["fields"]`` id fields: the graph's inputs, never run."""
    import tensorflow as tf

    from benchmarks import ctr_data

    del input_context
    fields = int(params.get("fields", ctr_data.FIELDS))
    batch = ctr_data.CtrShape.batch_size
    features = {
        "ids": tf.zeros([batch, fields], tf.int64),
        "dense": tf.zeros([batch, ctr_data.DENSE_FEATURES], tf.float32),
    }
    return tf.data.Dataset.from_tensors((features, tf.zeros([batch], tf.int64))).repeat()


def build_once(config: GraphConfig) -> dict:
    """Builds ``config``'s graph in a new default graph: {"graph_ops", "graph_build_s"} (imports not counted)."""
    import tensorflow as tf

    import ps_toolkit  # noqa: F401  (imported before the clock starts, as a task has it)

    tf.compat.v1.disable_eager_execution()
    build = (_raw_graph if config.system == systems.RAW else _toolkit_graph)(config)
    graph = tf.Graph()
    started = time.perf_counter()
    with graph.as_default():
        built = build()
    seconds = time.perf_counter() - started
    figures = {"graph_ops": len(graph.get_operations()), "graph_build_s": round(seconds, 3)}
    maintenance = _table_maintenance(built)
    if maintenance is not None:  # the chief's table maintenance: ops of its own runs, none in the step
        before = len(graph.get_operations())
        with graph.as_default():
            maintenance.begin()
        figures["maintenance_ops"] = len(graph.get_operations()) - before
    return figures


def _table_maintenance(built):
    """The TableMaintenanceHook of a toolkit graph (``replica_graph.TrainGraph``), or None."""
    from ps_toolkit import dynamic_embedding

    hooks = getattr(built, "hooks", None) or []
    return next((h for h in hooks if isinstance(h, dynamic_embedding.TableMaintenanceHook)), None)


def main(argv=None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--system", choices=BUILT_HERE, required=True)
    parser.add_argument("--fields", type=int, default=26)
    parser.add_argument("--tables", choices=("per_field", "shared"), default="per_field")
    parser.add_argument("--vocab", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=8)
    args = parser.parse_args(argv)
    for name in ("fields", "vocab", "dim"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}={getattr(args, name)} must be positive")
    config = GraphConfig(args.system, args.fields, args.tables, args.vocab, args.dim)
    print(GRAPH_PREFIX + json.dumps(build_once(config)), flush=True)


if __name__ == "__main__":
    main()
