"""Runs a parameter-server job on a Ray cluster: one Ray actor per task.

    ps-launch-ray                                   # a local Ray of its own: 1 ps + 2 workers, default model
    ps-launch-ray --address=auto --num_ps=2 --num_workers=4 --train_steps=5000
    ps-launch-ray --address=10.0.0.5:6379 --ray_worker_gpus=1 --model_fn=my_model:model_fn
    ps-launch-ray --restart=on-failure --chief -- python my_tf1_script.py --allow_open_ports ...

The flags are ps-launch-local's (topology, training flags, --restart,
--success_policy, --kill drills, --timeout_secs, --log_dir), plus where Ray is and
what each task asks of it. Every task runs on a Ray node: its port is reserved on
that node and the whole cluster is known before any server starts; its output is
in the run folder on this machine; the exit status is the local launcher's verdict.
The toolkit's tasks guard their own ports (see docs/deploy.md, Security); a command
after -- binds its own ports unguarded, so it needs --allow_open_ports.
"""

from __future__ import annotations

import dataclasses
import sys

from absl import app, flags

from ps_toolkit import cli
from ps_toolkit.base.errors import EXIT_CONFIG, ConfigError
from ps_toolkit.launch import ray_launcher
from ps_toolkit.task import open_ports
from ps_toolkit.task.port_guard import ALLOW_OPEN_PORTS_ENV
from ps_toolkit.tools import launch_local

_ADDRESS = flags.DEFINE_string(
    "address", None, "The Ray cluster: auto (the one this machine joined) or HOST:PORT; default: a Ray of its own."
)
_PS_CPUS = flags.DEFINE_float("ray_ps_cpus", 1.0, "Ray CPUs each ps task asks for.")
_WORKER_CPUS = flags.DEFINE_float("ray_worker_cpus", 1.0, "Ray CPUs each chief, worker and evaluator asks for.")
_WORKER_GPUS = flags.DEFINE_float("ray_worker_gpus", 0.0, "Ray GPUs each chief, worker and evaluator asks for.")
_LOCAL_CPUS = flags.DEFINE_integer("ray_num_cpus", None, "Logical CPUs of the Ray this launch starts (no --address).")
_READY = flags.DEFINE_float("ray_ready_secs", 120.0, "How long the tasks' resources and ports may take to be found.")

# ps-launch-local's flags that have no meaning on Ray: the addresses are the nodes', the tasks are exec'd
# by their actors, and a network namespace of this machine does not reach the other nodes.
_LOCAL_ONLY = ("ps_hosts", "worker_hosts", "chief_hosts", "evaluator_hosts", "isolation", "start_method")


def _fail(message: str) -> None:
    print(f"launch_ray: {message}", file=sys.stderr)
    sys.exit(EXIT_CONFIG)


def _parse(argv: list[str]) -> list[str]:
    """absl flags before ``--``; the command after it. Bad flags: one line, exit 2."""
    split = argv.index("--") if "--" in argv else len(argv)
    cli.print_help_and_exit_if_asked(argv[:split], __doc__)
    try:
        rest = flags.FLAGS(argv[:split])
    except flags.Error as err:
        _fail(str(err))
    if len(rest) > 1:
        _fail(f"unexpected argument {rest[1]!r}; put the task command after --")
    return argv[split + 1 :]


def launch(command: list[str]) -> int:
    """Runs the job the flags describe on Ray; its exit status."""
    given = [name for name in _LOCAL_ONLY if flags.FLAGS[name].present]
    if given:
        _fail(f"--{given[0]} is ps-launch-local's only: on Ray the nodes' addresses and start-up are Ray's")
    allow_open = open_ports.open_ports_allowed(flags.FLAGS.allow_open_ports)
    if command and not allow_open:
        _fail(
            "the command after -- binds its own ports, open on every interface of its node and unauthenticated: "
            "give --allow_open_ports if the Ray cluster's network is private"
        )
    try:
        options = launch_local.options_from_flags(command)
        ray_options = ray_launcher.RayOptions(
            address=_ADDRESS.value,
            ps_cpus=_PS_CPUS.value,
            worker_cpus=_WORKER_CPUS.value,
            worker_gpus=_WORKER_GPUS.value,
            local_num_cpus=_LOCAL_CPUS.value,
            ready_secs=_READY.value,
        )
        if allow_open:  # the tasks' own check reads it on their nodes
            options = dataclasses.replace(options, env={**(options.env or {}), ALLOW_OPEN_PORTS_ENV: "1"})
        return ray_launcher.launch(options, ray_options).exit_code
    except ConfigError as err:
        _fail(str(err))


def main() -> None:
    """The ``ps-launch-ray`` command."""
    cli.register_key_flags_for_program(__name__)
    app.run(lambda command: sys.exit(launch(command)), flags_parser=_parse)


if __name__ == "__main__":
    main()
