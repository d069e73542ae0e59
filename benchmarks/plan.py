"""Which configurations a benchmark run measures: ``--quick`` (the targets) or the full matrix."""

from __future__ import annotations

from benchmarks.ctr_bytes import FIELDS
from benchmarks.graph_size import MANY_FIELDS, MANY_FIELDS_VOCAB, GraphConfig
from benchmarks.systems import (
    ASYNC,
    CTR,
    RAW,
    SINGLE,
    SYNC,
    TF2,
    TOOLKIT,
    TOOLKIT_1STEP,
    TOOLKIT_DYNAMIC,
    TOOLKIT_NEAR,
    Config,
    CtrVariant,
)
from benchmarks.tfra_systems import TFRA_SYSTEMS

MODEL_NAMES = ("softmax", "mlp", "wide", "embedding", CTR)
# Global steps per run: a few seconds of training each on a 2-core machine.
TRAIN_STEPS = {"softmax": 3000, "mlp": 1500, "wide": 300, "embedding": 600, CTR: 2000}
# TF2's coordinator schedules every step from Python: a fifth as many keeps its runs short.
# Its AUC is then after fewer examples than the others' (the record says how many steps).
# Fewer for ps_toolkit_dynamic: its hash tables (MutableHashTable) read and write rows several times slower
# (a fifth would leave too few steps for both replicas to be past warm-up together).
CTR_DYNAMIC_STEPS_FRACTION = 0.3
CTR_TF2_STEPS_FRACTION = 0.2
CTR_LAWS = ("uniform", "zipf1.05", "zipf1.2")
# The ctr model's size: 26 x 1M x 8 float32 = 832 MB of tables (416 MB per ps).
CTR_VOCAB, CTR_DIM = 1_000_000, 8
# The embedding model's table is stated split over 2 ps (benchmarks/embedding_model.py).
EMBEDDING_TOPOLOGY = (2, 2)
TOPOLOGIES = ((1, 1), (1, 2), (2, 2))
# Where --compute_near_weights can pay: weights larger than a batch of inputs
# (softmax's 784x10 weights are 1/13 of a 100-image batch: nothing to save).
NEAR_WEIGHTS_MODELS = ("mlp", "wide")


# ps_toolkit's ctr levers, each turned off (or the opt-in one on) alone: --ctr_levers adds them at zipf1.05.
CTR_LEVERS = (("--nounique_ids",), ("--nogroup_lookups",), ("--steps_per_run=1",), ("--wire_dtype=bfloat16",))


def ctr_configs(
    steps_scale: float = 1.0, vocab: int = CTR_VOCAB, dim: int = CTR_DIM, full: bool = False, levers: bool = False
) -> list:
    """The ctr model at 2 ps + 2 workers, async: every system and id law with a table per field, and
    ps_toolkit_dynamic with one shared table too; with ``full``, every system and law with a shared table too;
    with ``levers``, ps_toolkit with each of ``CTR_LEVERS`` at zipf1.05."""
    steps = _steps(CTR, steps_scale)

    def of(system):
        dynamic = (TOOLKIT_DYNAMIC, *TFRA_SYSTEMS)
        fraction = CTR_DYNAMIC_STEPS_FRACTION if system in dynamic else 1.0
        fraction = CTR_TF2_STEPS_FRACTION if system == TF2 else fraction
        return max(20, int(steps * fraction))

    # ps_toolkit_dynamic as users write it (a table per field, as TFRA's demos and every CTR model do),
    # beside the fixed tables per field and beside today's one table the fields share (ids offset by field).
    configs = [
        Config(s, CTR, ASYNC, *EMBEDDING_TOPOLOGY, of(s), ctr=CtrVariant(law, "per_field", vocab, dim))
        for law in CTR_LAWS
        for s in (TOOLKIT, TOOLKIT_DYNAMIC, RAW, TF2, *TFRA_SYSTEMS)
    ]
    configs += [
        Config(
            TOOLKIT_DYNAMIC,
            CTR,
            ASYNC,
            *EMBEDDING_TOPOLOGY,
            of(TOOLKIT_DYNAMIC),
            ctr=CtrVariant(law, "shared", vocab, dim),
        )
        for law in CTR_LAWS
    ]
    shared = [(s, law) for law in CTR_LAWS for s in (TOOLKIT, RAW, TF2)] if full else []
    configs += [
        Config(s, CTR, ASYNC, *EMBEDDING_TOPOLOGY, of(s), ctr=CtrVariant(law, "shared", vocab, dim))
        for s, law in shared
    ]
    if levers:
        variant = CtrVariant("zipf1.05", "per_field", vocab, dim)
        configs += [Config(TOOLKIT, CTR, ASYNC, *EMBEDDING_TOPOLOGY, steps, lever, ctr=variant) for lever in CTR_LEVERS]
    return configs


def graph_configs(vocab: int = CTR_VOCAB, dim: int = CTR_DIM) -> list[GraphConfig]:
    """The ctr model's training graphs, sized and timed: every system that builds a TF1 graph with a table
    per field (26 fields, and 200 small ones), and ps_toolkit_dynamic's one shared table."""
    systems_with_graphs = (TOOLKIT, TOOLKIT_DYNAMIC, RAW, *TFRA_SYSTEMS)
    configs = [GraphConfig(s, FIELDS, "per_field", vocab, dim) for s in systems_with_graphs]
    configs.append(GraphConfig(TOOLKIT_DYNAMIC, FIELDS, "shared", vocab, dim))
    configs += [GraphConfig(s, MANY_FIELDS, "per_field", MANY_FIELDS_VOCAB, dim) for s in systems_with_graphs]
    return configs


def quick(
    models=MODEL_NAMES, steps_scale: float = 1.0, ctr_sizes: tuple = (CTR_VOCAB, CTR_DIM), ctr_levers: bool = False
) -> list[Config]:
    """The configurations the targets are stated for (1 ps + 2 workers), plus mlp sync and one step per run."""
    configs = []
    dense = [model for model in models if model not in ("embedding", CTR)]
    for model in dense:
        steps = _steps(model, steps_scale)
        configs += [Config(s, model, ASYNC, 1, 2, steps) for s in (TOOLKIT, RAW, TF2)]
        if model in NEAR_WEIGHTS_MODELS:
            configs.append(Config(TOOLKIT_NEAR, model, ASYNC, 1, 2, steps))
        configs.append(Config(SINGLE, model, ASYNC, 0, 1, steps))
    if dense:
        mlp = "mlp" if "mlp" in dense else dense[0]  # the model the 50%-of-single target is stated for
        configs += [Config(TOOLKIT_1STEP, mlp, ASYNC, 1, 2, _steps(mlp, steps_scale))]
        configs += [Config(s, mlp, SYNC, 1, 2, _steps(mlp, steps_scale) // 2) for s in (TOOLKIT, RAW, TOOLKIT_1STEP)]
    if "embedding" in models:
        configs += [
            Config(s, "embedding", ASYNC, *EMBEDDING_TOPOLOGY, _steps("embedding", steps_scale))
            for s in (TOOLKIT, RAW, TF2)
        ]
    if CTR in models:
        configs += ctr_configs(steps_scale, *ctr_sizes, levers=ctr_levers)
    return configs


def full(
    models=MODEL_NAMES, steps_scale: float = 1.0, ctr_sizes: tuple = (CTR_VOCAB, CTR_DIM), ctr_levers: bool = False
) -> list[Config]:
    """Every system on every model, topology and mode (TF2's strategy: async only)."""
    configs = []
    for model in models:
        steps = _steps(model, steps_scale)
        if model == CTR:
            configs += ctr_configs(steps_scale, *ctr_sizes, full=True, levers=ctr_levers)
            continue
        if model == "embedding":
            configs += [Config(s, model, ASYNC, *EMBEDDING_TOPOLOGY, steps) for s in (TOOLKIT, RAW, TF2)]
            configs += [Config(s, model, SYNC, *EMBEDDING_TOPOLOGY, steps // 2) for s in (TOOLKIT, RAW)]
            continue
        for num_ps, num_workers in TOPOLOGIES:
            for mode in (ASYNC, SYNC):
                mode_steps = steps if mode == ASYNC else steps // 2
                systems = (TOOLKIT, RAW, TOOLKIT_1STEP) + ((TF2,) if mode == ASYNC else ())
                systems += (TOOLKIT_NEAR,) if model in NEAR_WEIGHTS_MODELS else ()
                configs += [Config(s, model, mode, num_ps, num_workers, mode_steps) for s in systems]
        configs.append(Config(SINGLE, model, ASYNC, 0, 1, steps))
    return configs


def _steps(model: str, scale: float) -> int:
    return max(20, int(TRAIN_STEPS[model] * scale))
