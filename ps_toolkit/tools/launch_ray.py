"""Runs a parameter-server job on a Ray cluster: one Ray actor per task.

    ps-launch-ray                                   # a local Ray of its own: 1 ps + 2 workers, default model
    ps-launch-ray --address=auto --num_ps=2 --num_workers=4 --train_steps=5000
    ps-launch-ray --address=10.0.0.5:6379 --ray_worker_gpus=1 --model_fn=my_model:model_fn --input_fn=...
    ps-launch-ray --restart=on-failure --chief --allow_open_ports -- python my_tf1_script.py
    ps-launch-ray --address=auto --min_workers=2 --max_workers=4 --train_steps=100000   # then: echo 4 > RUN/workers

The flags are ps-launch-local's (topology, training flags, --restart,
--success_policy, --kill drills, --timeout_secs, --log_dir), plus where Ray is and
what each task asks of it. Every task runs on a Ray node: its port is reserved on
that node and the whole cluster is known before any server starts; its output is
in the run folder on this machine; the exit status is the local launcher's verdict.
The toolkit's tasks guard their own ports (docs/deploy.md, Security); a command
after -- binds its own ports unguarded, so it needs --allow_open_ports.
"""

from __future__ import annotations

import dataclasses
import sys

from absl import app, flags

from ps_toolkit import cli
from ps_toolkit.backends import registry
from ps_toolkit.backends.ray.launcher import RayOptions
from ps_toolkit.base.errors import ConfigError, ToolkitError
from ps_toolkit.tools import engine_flags

PROG = "launch_ray"
_ADDRESS = flags.DEFINE_string(
    "address", None, "The Ray cluster: auto (the one this machine joined) or HOST:PORT; default: a Ray of its own."
)
_PS_CPUS = flags.DEFINE_float("ray_ps_cpus", 1.0, "Ray CPUs each ps task asks for.")
_WORKER_CPUS = flags.DEFINE_float("ray_worker_cpus", 1.0, "Ray CPUs each chief, worker and evaluator asks for.")
_WORKER_GPUS = flags.DEFINE_float("ray_worker_gpus", 0.0, "Ray GPUs each chief, worker and evaluator asks for.")
_LOCAL_CPUS = flags.DEFINE_integer(
    "ray_num_cpus",
    None,
    "Logical CPUs of the Ray this launch starts (no --address); default: what the job asks, at least the cores.",
)
_READY = flags.DEFINE_float("ray_ready_secs", 120.0, "How long the tasks' resources and ports may take to be found.")
_MIN_WORKERS = flags.DEFINE_integer(
    "min_workers", None, "Elastic async workers: the permanent ones (replaces --num_workers); needs --max_workers."
)
_MAX_WORKERS = flags.DEFINE_integer(
    "max_workers", None, "Elastic async workers: at most this many; the run folder's 'workers' file sets the count."
)


def launch(command: list[str]) -> int:
    """Runs the job the flags describe on Ray; its exit status."""
    try:
        options = engine_flags.launch_options(PROG, "Ray", command)
        if _MIN_WORKERS.value is not None:
            if flags.FLAGS["num_workers"].present:
                raise ConfigError("--num_workers beside --min_workers: the permanent workers are --min_workers")
            topology = dataclasses.replace(options.topology, num_workers=_MIN_WORKERS.value)
            options = dataclasses.replace(options, topology=topology)
        ray_options = RayOptions(
            address=_ADDRESS.value,
            ps_cpus=_PS_CPUS.value,
            worker_cpus=_WORKER_CPUS.value,
            worker_gpus=_WORKER_GPUS.value,
            local_num_cpus=_LOCAL_CPUS.value,
            ready_secs=_READY.value,
            min_workers=_MIN_WORKERS.value,
            max_workers=_MAX_WORKERS.value,
        )
        return registry.run("ray", options, ray_options).exit_code
    except ConfigError as err:
        engine_flags.fail(PROG, str(err))
    except ToolkitError as err:  # the engine could not be reached or started: one line, its status
        print(f"{PROG}: {err}", file=sys.stderr)
        return err.exit_code


def main() -> None:
    """The ``ps-launch-ray`` command."""
    engine_flags.adopt_launch_flags(__name__)
    cli.register_key_flags_for_program(__name__)
    app.run(lambda command: sys.exit(launch(command)), flags_parser=engine_flags.parser_for(PROG, __doc__))


if __name__ == "__main__":
    main()
