"""The TFRA systems: one TFRA-API script of the ctr model (benchmarks/tfra_ctr.py) on two stacks.

``tfra_tf2_15``: real TensorFlow 2.15.1 with tensorflow-recommenders-addons 0.7.2, in the
virtual environment ``benchmarks.tfra_env`` makes (or the python given by --tfra_python).
``ps_toolkit_tfra``: the same file, unchanged, under ``scripts/run_legacy.py`` on this
TensorFlow (ps_toolkit's compat layer serves ``import tensorflow_recommenders_addons``).
Tasks start as TFRA's movielens-1m-ps demo starts them (start.sh): one process per task,
by hand, the demo's flags; the ps joins forever.
"""

from __future__ import annotations

import dataclasses
import os
import sys

from absl import logging

from benchmarks import CHECKOUT

TFRA_TF2_15, TOOLKIT_TFRA = "tfra_tf2_15", "ps_toolkit_tfra"
TFRA_SYSTEMS = (TFRA_TF2_15, TOOLKIT_TFRA)
TFRA_ENV_NAME = "tf2.15-tfra0.7"  # benchmarks.tfra_env's name of TF 2.15.1 + TFRA 0.7.2
SCRIPT = os.path.join(CHECKOUT, "benchmarks", "tfra_ctr.py")
RUN_LEGACY = os.path.join(CHECKOUT, "scripts", "run_legacy.py")


def real_tfra_python(given: str | None = None) -> tuple[str | None, str]:
    """(the python of real TFRA's environment, or None, one line why): ``given`` if it runs, else tfra_env's."""
    if given:
        if os.path.isfile(given) and os.access(given, os.X_OK):
            return given, f"--tfra_python={given}"
        return None, f"--tfra_python={given} is not an executable file"
    try:
        from benchmarks import tfra_env
    except ImportError:
        return None, "benchmarks/tfra_env.py (the maker of TFRA's environments) is not in this checkout"
    python, reason = tfra_env.ensure_env(TFRA_ENV_NAME)
    return python, reason


def script_argv(system: str, tfra_python: str | None) -> tuple[str, list[str]]:
    """(python, its arguments before the script's flags): real TFRA's python, or this one through run_legacy.py."""
    if system == TFRA_TF2_15:
        if tfra_python is None:
            raise ValueError(f"{TFRA_TF2_15} needs real TFRA's python (none was made)")
        return tfra_python, [SCRIPT]
    return sys.executable, [RUN_LEGACY, SCRIPT]


def graph_command(system: str, fields: int, vocab: int, dim: int, tfra_python: str | None) -> list[str]:
    """One ``--graph_only`` build of the TFRA script on ``system``'s stack."""
    python, args = script_argv(system, tfra_python)
    return [python, *args, "--graph_only", f"--ctr_fields={fields}", f"--ctr_vocab={vocab}", f"--ctr_dim={dim}"]


def tasks(config, ports: list[int], checkpoint_dir: str, tfra_python: str | None) -> list:
    """The ps and worker processes of one TFRA run (the demo's start.sh: ps first, worker 0 the chief)."""
    from benchmarks.cluster_run import Task

    addresses = [f"localhost:{port}" for port in ports]
    ps, workers = addresses[: config.num_ps], addresses[config.num_ps : config.num_ps + config.num_workers]
    variant = config.ctr
    python, args = script_argv(config.system, tfra_python)
    base = [
        *args,
        f"--ps_list={','.join(ps)}",
        f"--worker_list={','.join(workers)}",
        f"--ctr_ids={variant.ids}",
        f"--ctr_vocab={variant.vocab}",
        f"--ctr_dim={variant.dim}",
        f"--checkpoint_dir={checkpoint_dir}",
        # Timed as the raw script is: after its chief has evaluated at the step the others stop at.
        f"--warmup_steps={config.train_steps}",
        f"--auc_step={config.train_steps}",
    ]
    result = [
        Task(f"ps{i}", [*base, "--task_mode=ps", f"--task_id={i}"], must_finish=False, executable=python)
        for i in range(config.num_ps)
    ]
    result += [
        Task(f"worker{i}", [*base, "--task_mode=worker", f"--task_id={i}", f"--is_chief={i == 0}"], executable=python)
        for i in range(config.num_workers)
    ]
    return result


def with_real_tfra(configs: list, graphs: list, given_python: str | None) -> tuple[list, list, list, str | None]:
    """(configs, graphs, skip lines, real TFRA's python): tfra_tf2_15's runs told that python, or left out
    with one line where its environment cannot be made."""
    if not any(c.system == TFRA_TF2_15 for c in (*configs, *graphs)):
        return configs, graphs, [], None
    python, reason = real_tfra_python(given_python)
    if python is None:
        line = f"{TFRA_TF2_15} skipped: {reason}"
        logging.warning(line)
        keep = lambda items: [c for c in items if c.system != TFRA_TF2_15]  # noqa: E731
        return keep(configs), keep(graphs), [line], None
    configs = [dataclasses.replace(c, python=python) if c.system == TFRA_TF2_15 else c for c in configs]
    return configs, graphs, [], python
