"""Launch backends by name: each is a callable; a user's own backend is one ``register_backend`` call.

    from ps_toolkit.backends import registry
    registry.register_backend("mine", my_launch)        # my_launch(options, settings) -> RunResult
    result = registry.run("mine", options)               # what ps-launch-local --backend=mine does

A backend is called as ``backend(options, settings)``: ``options`` the launch
(``backends.local.LaunchOptions``: task command, topology, policy, run folder;
None for the backends that only write a job file), ``settings`` what only that
backend knows (Ray's address, Spark's master, the sbatch or Kubernetes spec).
A backend that runs the job returns its ``RunResult``; one that writes a job
for another system's scheduler (slurm, kubernetes) returns the file's text.
The built-in backends are imported on first use, so that naming one never
imports another's engine (Ray, pyspark).
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import Any

from ps_toolkit.base.errors import ConfigError

Backend = Callable[[Any, Any], Any]

# The toolkit's own backends: name -> (module under ps_toolkit.backends, its entry function).
_BUILT_IN = {
    "local": ("local", "run_local"),
    "ray": ("ray.launcher", "run_ray"),
    "spark": ("spark.launcher", "run_spark"),
    "slurm": ("slurm", "write_sbatch"),
    "kubernetes": ("kubernetes", "write_manifests"),
    "volcano": ("volcano", "write_manifests"),
}
# The built-in backends that cannot run without settings of their own: the command whose flags give them.
_SETTINGS_FROM = {
    "ray": "ps-launch-ray",
    "spark": "ps-launch-spark",
    "slurm": "ps-make-slurm-job",
    "kubernetes": "ps-make-tfjob",
    "volcano": "ps-make-tfjob --volcano",
}
_REGISTERED: dict[str, Backend] = {}
_LOCK = threading.Lock()


def register_backend(name: str, backend: Backend, *, replace: bool = False) -> None:
    """Makes ``backend`` the launch backend called ``name``.

    Args:
      name: the name a launcher is given (``--backend=NAME``); not empty.
      backend: called as ``backend(options, settings)`` (see the module doc).
      replace: allow replacing a backend already registered under ``name`` (a built-in one included).

    Raises:
      ValueError: the name is empty or taken (without ``replace``), or ``backend`` is not callable.
    """
    if not name or not isinstance(name, str):
        raise ValueError(f"backend name {name!r}: give a non-empty string")
    if not callable(backend):
        raise ValueError(f"backend {name!r}: {backend!r} is not callable")
    with _LOCK:
        if not replace and (name in _REGISTERED or name in _BUILT_IN):
            raise ValueError(f"backend {name!r} is already registered; pass replace=True to replace it")
        _REGISTERED[name] = backend


def is_built_in(name: str) -> bool:
    """Whether ``name`` is one of the toolkit's own backends."""
    return name in _BUILT_IN


def names() -> list[str]:
    """Every backend name a launcher accepts, sorted."""
    with _LOCK:
        return sorted(set(_BUILT_IN) | set(_REGISTERED))


def backend(name: str, source: str = "backend") -> Backend:
    """The backend registered as ``name`` (a built-in one is imported now).

    Args:
      name: a registered or built-in backend name.
      source: where the name came from, for the error (a flag, say ``--backend``).

    Returns:
      The backend callable.

    Raises:
      ConfigError: no backend has that name (the message lists those that exist).
    """
    with _LOCK:
        found = _REGISTERED.get(name)
    if found is not None:
        return found
    if name not in _BUILT_IN:
        raise ConfigError(f"{source}={name!r}: no such launch backend; known: {', '.join(names())}")
    module, function = _BUILT_IN[name]
    return getattr(importlib.import_module(f"{__package__}.{module}"), function)


def usable(name: str, settings: Any = None, source: str = "backend") -> Backend:
    """The backend called ``name``, checked to be callable with ``settings``.

    Raises:
      ConfigError: no backend has that name, or a built-in one that needs settings of its own got none.
    """
    chosen = backend(name, source)
    with _LOCK:
        built_in = name not in _REGISTERED
    if built_in and settings is None and name in _SETTINGS_FROM:
        raise ConfigError(f"{source}={name!r}: that backend needs settings of its own; run {_SETTINGS_FROM[name]}")
    return chosen


def run(name: str, options: Any = None, settings: Any = None, *, source: str = "backend") -> Any:
    """Runs (or writes) the job through the backend called ``name``; what the backend returns.

    Raises:
      ConfigError: the backend is not usable with ``settings`` (see ``usable``), or what it raises for bad input.
    """
    return usable(name, settings, source)(options, settings)
