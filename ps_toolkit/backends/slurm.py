"""The sbatch script that runs a whole ps_toolkit cluster as one Slurm job step."""

from __future__ import annotations

import shlex

from ps_toolkit.cluster.slurm import DEFAULT_BASE_PORT


def sbatch_script(
    *,
    python: str,
    run_task: str,
    roles: list[tuple[str, int]],
    task_args: list[str],
    base_port: int = DEFAULT_BASE_PORT,
    sbatch_options: list[str] = (),
    command_line: str = "",
) -> str:
    """An sbatch script that runs the whole cluster as one srun step, one Slurm task per cluster task.

    ``roles`` are the jobs in rank order, e.g. [("ps", 1), ("worker", 2)];
    ``task_args`` the training flags every task gets.
    """
    num_tasks = sum(count for _, count in roles)
    role_text = ",".join(f"{job}:{count}" for job, count in roles)
    described = " + ".join(f"{count} {job}" for job, count in roles)
    task = [python, run_task, "--cluster_from=slurm", f"--slurm_roles={role_text}", f"--slurm_port_base={base_port}"]
    lines = [
        "#!/bin/bash",
        f"# A ps_toolkit cluster on Slurm: {described}, one srun step. Submit with: sbatch <this file>",
    ]
    if command_line:
        lines.append(f"# Written by: {command_line}")
    lines += [f"#SBATCH --ntasks={num_tasks}", *(f"#SBATCH {option}" for option in sbatch_options), "set -eu"]
    lines += [
        "# The cluster comes from Slurm (SLURM_PROCID, the step's node list); a TF_CONFIG",
        "# exported by the submitting shell would contradict it.",
        "unset TF_CONFIG",
        "# TensorFlow's gRPC servers listen on every interface with no authentication:",
        f"# ports {base_port}+ must not be reachable from outside the cluster's network.",
        "# --kill-on-bad-exit ends the step when a task fails, so no ps waits for a dead worker;",
        "# srun's status is the highest status of its tasks, so 0 means every task succeeded.",
        f"exec srun --ntasks={num_tasks} --kill-on-bad-exit=1 --label \\",
        "    " + " ".join(shlex.quote(arg) for arg in task + list(task_args)),
    ]
    return "\n".join(lines) + "\n"


def write_sbatch(options: None, settings: dict) -> str:
    """The ``slurm`` backend (backends.registry): the sbatch script; ``settings`` are ``sbatch_script``'s arguments."""
    del options  # the job runs under Slurm's own scheduler: no local launch to describe
    return sbatch_script(**settings)
