"""Which fully connected layers run on the ps that holds their weights (``--compute_near_weights``).

Design: docs/design.md, "Layers near their weights".
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from ps_toolkit.placement.choices import NEAR_WEIGHTS_MODES, PACK_LIMIT_BYTES

# Near must move at most this share of the bytes: it also adds a hop per
# layer and puts the arithmetic on the ps, which serves every worker.
MAX_NEAR_BYTES_SHARE = 0.25
# The largest replica count the rule was measured at (docs/performance.md); beyond
# it, the ps's arithmetic for every replica is a bet on its cores against its network.
MAX_REPLICAS_NEAR = 2


def near_rule(
    mode: str, batch_size: int, *, worker_has_gpu: bool = False, partitioned: bool = False, num_replicas: int = 1
) -> Callable[[int, int, int], bool]:
    """``runs_near(fan_in, units, bytes_per_value)`` for a layer with a fan_in x units weight matrix.

    ``partitioned``: the weights are split across ps tasks, so no ps holds a whole matrix.
    ``num_replicas``: training replicas (the chief and the workers); the ps holding a matrix serves them all.
    """
    if mode not in NEAR_WEIGHTS_MODES:
        raise ValueError(f"near-weights mode must be one of {', '.join(NEAR_WEIGHTS_MODES)}, got {mode!r}")

    def runs_near(fan_in: int, units: int, bytes_per_value: int) -> bool:
        if mode != "auto":
            return mode == "all"
        if worker_has_gpu or partitioned or num_replicas > MAX_REPLICAS_NEAR:
            return False
        matrix_bytes = fan_in * units * bytes_per_value
        # Forward: input and output; backward: the output's gradient and the input's.
        activation_bytes = 2 * batch_size * (fan_in + units) * bytes_per_value
        # Run on the worker, a step pulls the matrix and pushes its gradient.
        return matrix_bytes > PACK_LIMIT_BYTES and activation_bytes <= MAX_NEAR_BYTES_SHARE * 2 * matrix_bytes

    return runs_near


_rules_in_effect: list[Callable[[int, int, int], bool]] = []


@contextlib.contextmanager
def rule_in_effect(runs_near: Callable[[int, int, int], bool]):
    """Makes ``runs_near`` the rule ``ps_toolkit.placement.layers.dense`` follows while a model_fn builds the graph."""
    _rules_in_effect.append(runs_near)
    try:
        yield
    finally:
        _rules_in_effect.pop()


def current_rule() -> Callable[[int, int, int], bool]:
    """The rule in effect; outside the toolkit's graph building every layer runs on the worker."""
    return _rules_in_effect[-1] if _rules_in_effect else _never


def _never(fan_in: int, units: int, bytes_per_value: int) -> bool:
    return False
