"""What ps-launch-ray and ps-launch-spark share: ps-launch-local's flags, the refusals an engine needs, the parse.

Importing this module defines ps-launch-local's flags (through launch_local);
the engine's tool defines its own beside them.
"""

from __future__ import annotations

import dataclasses
import sys

from absl import flags

from ps_toolkit import cli
from ps_toolkit.backends.local import LaunchOptions
from ps_toolkit.base.errors import EXIT_CONFIG
from ps_toolkit.network import open_ports
from ps_toolkit.network.port_guard import ALLOW_OPEN_PORTS_ENV
from ps_toolkit.tools import launch_local

# ps-launch-local's flags that mean nothing on an engine: the addresses are the nodes', the tasks are
# exec'd there, and a network namespace of this machine does not reach the other nodes.
LOCAL_ONLY = ("ps_hosts", "worker_hosts", "chief_hosts", "evaluator_hosts", "isolation", "start_method")
# Flags the engines' task plans do not carry: refused rather than silently ignored.
NOT_ON_ENGINES = ("chief_role_name", "task_args")


def adopt_launch_flags(tool_module: str) -> None:
    """Makes ps-launch-local's flags that hold on an engine key flags of ``tool_module``: its --help lists them."""
    for flag in flags.FLAGS.get_key_flags_for_module(launch_local.__name__):
        if flag.name not in LOCAL_ONLY:
            flags.FLAGS.register_key_flag_for_module(tool_module, flag)


def fail(prog: str, message: str) -> None:
    """One line on stderr, exit 2: bad input."""
    print(f"{prog}: {message}", file=sys.stderr)
    sys.exit(EXIT_CONFIG)


def parser_for(prog: str, doc: str):
    """absl's flags_parser: flags before ``--``, the command after it; bad flags are one line and exit 2."""

    def parse(argv: list[str]) -> list[str]:
        split = argv.index("--") if "--" in argv else len(argv)
        cli.print_help_and_exit_if_asked(argv[:split], doc)
        try:
            rest = flags.FLAGS(argv[:split])
        except flags.Error as err:
            fail(prog, str(err))
        if len(rest) > 1:
            fail(prog, f"unexpected argument {rest[1]!r}; put the task command after --")
        return argv[split + 1 :]

    return parse


def launch_options(prog: str, engine: str, command: list[str]) -> LaunchOptions:
    """ps-launch-local's options from the flags, with what an engine refuses refused (ConfigError or exit 2).

    The toolkit's tasks guard their own ports on their nodes; a command after -- binds its own, unguarded,
    so it needs --allow_open_ports, which then reaches the tasks on their nodes too.
    """
    given = [name for name in LOCAL_ONLY if flags.FLAGS[name].present]
    if given:
        fail(prog, f"--{given[0]} is ps-launch-local's only: on {engine} the nodes' addresses and start-up are its own")
    given = [name for name in NOT_ON_ENGINES if flags.FLAGS[name].present]
    if given:
        fail(prog, f"--{given[0]} is not served on {engine} yet: its tasks get the classic cluster flags and TF_CONFIG")
    allow_open = open_ports.open_ports_allowed(flags.FLAGS.allow_open_ports)
    if command and not allow_open:
        fail(
            prog,
            f"the command after -- binds its own ports, open on every interface of its {engine} node and "
            f"unauthenticated: give --allow_open_ports if the {engine} cluster's network is private",
        )
    options = launch_local.options_from_flags(command)
    if allow_open:
        options = dataclasses.replace(options, env={**(options.env or {}), ALLOW_OPEN_PORTS_ENV: "1"})
    return options
