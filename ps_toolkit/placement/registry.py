"""The placement strategies by name: the built-in ones and a user's own, each a function registered with one call.

A strategy is a function ``strategy(num_ps, seed)`` that returns the
``ps_strategy`` of ``tf.compat.v1.train.replica_device_setter`` (a callable that
takes a variable's op and returns the index of the ps task to put it on), or None
for replica_device_setter's own round robin. It is called once per graph, on
every worker with the same arguments, so every worker must compute the same
placement from them.

    from ps_toolkit.placement import registry

    def by_name_length(num_ps, seed):
        return lambda op: len(op.name) % num_ps

    registry.register_strategy("by_name_length", by_name_length)
    ps_toolkit.train(model_fn, input_fn, config=ps_toolkit.TrainConfig(placement="by_name_length"))

Importable before TensorFlow (flags and configs check names here); the built-in
strategies import it only when they are made.
"""

from __future__ import annotations

from collections.abc import Callable

from ps_toolkit.base.registry import Registry

PlacementStrategy = Callable[[int, int], Callable | None]
DEFAULT_STRATEGY = "round_robin"


def _round_robin(num_ps: int, seed: int) -> None:
    """replica_device_setter's own round robin over the ps tasks, in the order variables are made."""
    return None


def _greedy(num_ps: int, seed: int) -> Callable:
    """Each variable on the ps task with the fewest bytes so far."""
    from ps_toolkit.placement import ps_strategies  # TensorFlow's import only when a strategy is made

    return ps_strategies.GreedyLoadBalancingStrategy(num_ps, ps_strategies.byte_size_load_fn)


def _random(num_ps: int, seed: int) -> Callable:
    """Each variable on a ps task chosen by a hash of its op name and ``seed``."""
    from ps_toolkit.placement import ps_strategies

    return ps_strategies.RandomStrategy(num_ps, seed)


_BUILT_IN = {"round_robin": _round_robin, "greedy": _greedy, "random": _random}
STRATEGIES = Registry("placement strategy", "--placement", "(num_ps, seed)", _BUILT_IN)
BUILT_IN_STRATEGIES = STRATEGIES.built_in


def register_strategy(name: str, strategy: PlacementStrategy) -> None:
    """Makes ``strategy`` the placement strategy called ``name`` (``--placement=name``, ``TrainConfig.placement``).

    Args:
        name: The strategy's name; a built-in name cannot be taken.
        strategy: ``strategy(num_ps, seed)`` returning a ps_strategy callable (op -> ps task index) or None.

    Raises:
        ValueError: ``name`` is empty or a built-in strategy's, or ``strategy`` is not callable.
    """
    STRATEGIES.register(name, strategy)
