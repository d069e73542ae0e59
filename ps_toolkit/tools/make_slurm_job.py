"""Writes an sbatch script that runs a parameter-server cluster on Slurm as one srun step.

    python scripts/make_slurm_job.py --num_ps=1 --num_workers=2 --train_steps=500 \\
        --checkpoint_dir=/shared/ckpt > job.sh
    sbatch job.sh

Each Slurm task runs scripts/run_task.py --cluster_from=slurm: the first ranks
are the parameter servers, then the chief (--chief), the workers and the
evaluator (--evaluator); each task listens on --port_base plus its offset on
its node. Training flags given here are passed to every task. Bad flags: one
line on stderr and exit status 2.
"""

from __future__ import annotations

import os
import shlex
import sys

from absl import flags

from ps_toolkit import cli
from ps_toolkit.backends import registry
from ps_toolkit.cluster import slurm
from ps_toolkit.tools import entries

_NUM_PS = flags.DEFINE_integer("num_ps", 1, "Parameter server tasks (the first ranks).")
_NUM_WORKERS = flags.DEFINE_integer("num_workers", 2, "Worker tasks.")
_CHIEF = flags.DEFINE_boolean("chief", False, "Add a chief task (else worker 0 is the chief).")
_EVALUATOR = flags.DEFINE_boolean("evaluator", False, "Add an evaluator task (needs a shared --checkpoint_dir).")
_PORT_BASE = flags.DEFINE_integer("port_base", slurm.DEFAULT_BASE_PORT, "Port of the first task on each node.")
_SLURM_JOB_NAME = flags.DEFINE_string("slurm_job_name", "ps_toolkit", "sbatch --job-name.")
_OUTPUT = flags.DEFINE_string("output", "ps_toolkit-%j.out", "sbatch --output: where every task's lines go.")
_TIME = flags.DEFINE_string("time", None, "sbatch --time limit, e.g. 01:00:00.")
_PARTITION = flags.DEFINE_string("partition", None, "sbatch --partition.")
_NODES = flags.DEFINE_string("nodes", None, "sbatch --nodes, e.g. 2 or 2-4.")
_SBATCH = flags.DEFINE_multi_string("sbatch", [], "Any other sbatch option, e.g. --sbatch=--account=ml.")
_PYTHON = flags.DEFINE_string("python", sys.executable, "The Python interpreter on the compute nodes.")
_ALLOW_OPEN_PORTS = flags.DEFINE_boolean(
    "allow_open_ports",
    False,
    "Tasks not running as root cannot install the packet-filter rules that admit only the job's nodes, and "
    "refuse to start: say the cluster network is private (docs/deploy.md) to let them serve unfenced.",
)

# Every training flag run_task.py knows, validated here and passed on when given.
_BEFORE = set(flags.FLAGS)
cli.define_training_flags()
flags.adopt_module_key_flags(cli)  # --help lists them as this script's own
TRAINING_FLAGS = sorted(set(flags.FLAGS) - _BEFORE)
# The checkout's scripts/run_task.py; installed without a checkout, the run_task tool's own file.
RUN_TASK = (
    entries.RUN_TASK_SCRIPT
    if os.path.isfile(entries.RUN_TASK_SCRIPT)
    else os.path.join(os.path.dirname(os.path.abspath(__file__)), "run_task.py")
)


def roles() -> list[tuple[str, int]]:
    """The jobs in rank order."""
    if _NUM_PS.value < 0 or _NUM_WORKERS.value < (0 if _CHIEF.value else 1):
        cli.fail(f"--num_ps={_NUM_PS.value} --num_workers={_NUM_WORKERS.value}: need ps >= 0 and a worker or --chief")
    layout = [("ps", _NUM_PS.value), ("chief", int(_CHIEF.value)), ("worker", _NUM_WORKERS.value)]
    layout.append(("evaluator", int(_EVALUATOR.value)))
    return [(job, count) for job, count in layout if count]


def sbatch_options() -> list[str]:
    given = {
        "--job-name": _SLURM_JOB_NAME.value,
        "--output": _OUTPUT.value,
        "--time": _TIME.value,
        "--partition": _PARTITION.value,
        "--nodes": _NODES.value,
    }
    return [f"{name}={value}" for name, value in given.items() if value] + list(_SBATCH.value)


def _main(argv):
    if len(argv) > 1:
        cli.fail(f"unexpected arguments {' '.join(argv[1:])!r}; flags look like --name=value")
    if not 1 <= _PORT_BASE.value <= 65000:
        cli.fail(f"--port_base={_PORT_BASE.value} must be between 1 and 65000")
    task_args = [flags.FLAGS[name].serialize() for name in TRAINING_FLAGS if flags.FLAGS[name].present]
    task_args += ["--allow_open_ports"] if _ALLOW_OPEN_PORTS.value else []
    settings = {
        "python": _PYTHON.value,
        "run_task": RUN_TASK,
        "roles": roles(),
        "task_args": task_args,
        "base_port": _PORT_BASE.value,
        "sbatch_options": sbatch_options(),
        "command_line": " ".join(shlex.quote(arg) for arg in ["make_slurm_job.py", *sys.argv[1:]]),
    }
    script = registry.run("slurm", None, settings)
    sys.stdout.write(script)


def main() -> None:
    """The ``ps-make-slurm-job`` command."""
    cli.run_tool(_main, __name__)


if __name__ == "__main__":
    main()
