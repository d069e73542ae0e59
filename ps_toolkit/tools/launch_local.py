"""Runs a parameter-server cluster on this machine: one process per task, on loopback.

    python scripts/launch_local.py                     # 1 ps + 2 workers, async, default model
    python scripts/launch_local.py --num_ps=2 --num_workers=3 --sync_replicas --train_steps=500
    python scripts/launch_local.py --chief --evaluator -- python my_tf1_script.py --data_dir=/data
    python scripts/launch_local.py --restart=on-failure --kill=ps:0@5s   # a chaos drill
    python scripts/launch_local.py --isolation=none --allow_open_ports   # plain loopback, ports reachable here

Without a command after ``--`` every task runs scripts/run_task.py with the
training flags given here. With one, every task runs that command with
``--ps_hosts=... --worker_hosts=... --job_name=... --task_index=...`` appended
and TF_CONFIG set. TensorFlow's servers listen on every interface, unauthenticated,
so by default (--isolation=auto) the tasks run in a private network namespace
with only a loopback of its own (see ps_toolkit/network/netns.py); where none can be
made the launcher says so in one warning line and uses this machine's loopback.
Exit status: 0 when the run succeeded under
--success_policy (and no task failed for good, and training happened: ps_toolkit/launch/verdict.py);
otherwise the failed task's status (2 for bad flags here).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys

from absl import app, flags

from ps_toolkit import cli
from ps_toolkit.backends import local, registry
from ps_toolkit.base import user_calls
from ps_toolkit.base.errors import EXIT_CONFIG, ConfigError
from ps_toolkit.cluster import addresses, preflight
from ps_toolkit.cluster import config as cluster_lib
from ps_toolkit.launch import charts, task_plan
from ps_toolkit.launch.drills import parse_kill
from ps_toolkit.launch.policy import RESTART_POLICIES, SUCCESS_POLICIES, Policy
from ps_toolkit.launch.task_plan import Topology, default_command, hosts_from_flags
from ps_toolkit.network import netns, open_ports
from ps_toolkit.process import fork_starter
from ps_toolkit.training import user_code

_NUM_PS = flags.DEFINE_integer("num_ps", 1, "Parameter server tasks.")
_NUM_WORKERS = flags.DEFINE_integer("num_workers", 2, "Worker tasks.")
_CHIEF = flags.DEFINE_boolean("chief", False, "Add a chief task (else worker 0 is the chief).")
_EVALUATOR = flags.DEFINE_boolean("evaluator", False, "Add an evaluator task.")
_HOSTS = {
    job: flags.DEFINE_string(f"{job}_hosts", None, f"Explicit {job} addresses host:port,... instead of counts.")
    for job in ("ps", "worker", "chief", "evaluator")
}
# --log_dir is absl.logging's own flag, reused (defining it again would clash), with this help.
flags.FLAGS["log_dir"].help = (
    "The run folder: task logs, progress chart, summary, default checkpoints. Default: a fresh folder under "
    "$TMPDIR/ps_toolkit-<uid>/runs/, where the 20 most recently modified run folders are kept."
)
flags.declare_key_flag("log_dir")
_QUIET = flags.DEFINE_boolean("quiet", False, "Console shows only status and summary, not task output.")
_CHART = flags.DEFINE_boolean(
    "chart",
    True,
    f"Draw {local.CHART_FILE} (loss and steps/s per worker) in the run folder; --nochart skips matplotlib.",
)
_SUCCESS = flags.DEFINE_enum(
    "success_policy", "chief", SUCCESS_POLICIES, "chief: the chief's status 0 ends the run; all_workers."
)
_SUCCESS_PATTERN = flags.DEFINE_string(
    "success_pattern",
    None,
    "A regular expression: a task output line it matches shows that the job did its work (for a script whose "
    "own result lines the verdict does not know; without it a run that trained nothing fails).",
)
_GRACE = flags.DEFINE_float("grace_secs", 10.0, "After success, time the other workers get to end by themselves.")
_PS_GRACE = flags.DEFINE_float("ps_grace_secs", 5.0, "Then the time parameter servers get to end by themselves.")
_STOP_GRACE = flags.DEFINE_float("stop_grace_secs", 5.0, "Between SIGTERM and SIGKILL when a task is stopped.")
_RESTART = flags.DEFINE_enum("restart", "never", RESTART_POLICIES, "Restart failed tasks in place.")
_MAX_RESTARTS = flags.DEFINE_integer("max_restarts", 3, "Restarts allowed per task with --restart=on-failure.")
_KILL = flags.DEFINE_multi_string("kill", [], "Chaos drill JOB:INDEX@SECONDS, e.g. ps:0@5s: SIGKILL it then.")
_TIMEOUT = flags.DEFINE_float("timeout_secs", None, "Stop everything and fail if the run lasts longer.")
_START_METHOD = flags.DEFINE_enum(
    "start_method",
    "fork",
    ("fork", "exec"),
    "fork: one process imports TensorFlow once and forks the toolkit's tasks (run_task.py, run_legacy.py): "
    "the host's fork server named by $PS_TOOLKIT_FORK_SERVER when it can serve them, else one this launch "
    "starts; exec: every task is a fresh process. Other commands after -- are always exec'd.",
)
_BACKEND = flags.DEFINE_string(
    "backend",
    "local",
    "Where the tasks run: a launch backend's name (ps_toolkit.backends.registry: local, or one registered by "
    "register_backend) or MODULE:FUNCTION, a function of your own called as FUNCTION(options, None) that "
    "returns the run's result (its exit_code) or an exit status.",
)
_CHIEF_ROLE = flags.DEFINE_enum(
    "chief_role_name",
    "chief",
    task_plan.CHIEF_ROLES,
    "The chief's job name in TF_CONFIG and the cluster flags: master for Cloud ML Engine and TF 1.x estimator "
    "scripts that know the chief as master (with --chief).",
)
_TASK_ARGS = flags.DEFINE_string(
    "task_args",
    None,
    "What each task gets appended instead of --ps_hosts/--worker_hosts/--job_name/--task_index: none "
    "(TF_CONFIG alone), or a template such as '--task_mode={job} --task_id={index} --ps_list={ps_hosts}' "
    f"(fields: {', '.join(task_plan.TASK_ARG_FIELDS)}).",
)
_ISOLATION = flags.DEFINE_enum(
    "isolation",
    "auto",
    ("auto", "netns", "none"),
    "Run the tasks in a private network namespace, unreachable from outside it. auto: when possible, "
    "else warn and use loopback; netns: required (exit 2 if impossible); none: no namespace of the launcher's "
    "own (each task then keeps its port private as a hand-started task does: its cluster's namespace or rules; "
    "with --allow_open_ports, plain loopback).",
)

# scripts/run_task.py's training flags, defined once (ps_toolkit.cli) with their help, defaults
# and choices, and passed through to every task when given here.
_TRAIN_FLAGS = (
    cli.names_defined_by(cli.define_training_flags)
    + cli.names_defined_by(cli.define_ps_flags)
    + cli.names_defined_by(cli.define_port_flags)
)
flags.adopt_module_key_flags(cli)  # --help lists them as this script's own


def _train_args(run_dir: str) -> list[str]:
    args = []
    for name in _TRAIN_FLAGS:
        if not flags.FLAGS[name].present:
            continue
        value = flags.FLAGS[name].value
        if isinstance(value, bool):
            args.append(f"--{name}" if value else f"--no{name}")
        else:
            args.append(f"--{name}={value}")
    if not flags.FLAGS["checkpoint_dir"].present:
        args.append(f"--checkpoint_dir={os.path.join(run_dir, 'checkpoints')}")
    return args


def options_from_flags(command: list[str]) -> local.LaunchOptions:
    """The launch the flags describe: the task command (the given one, or run_task.py with the training
    flags), the topology and the policy; ConfigError for bad input. Shared by every launcher tool."""
    given = [name for name in _TRAIN_FLAGS if flags.FLAGS[name].present and name != "allow_open_ports"]
    if command and given:
        raise ConfigError(
            f"--{given[0]} is a scripts/run_task.py flag; with a command after --, give it to the command"
        )
    # A model the tasks could not find is refused here, before any task starts.
    cli.check_model_flags()
    hosts = {job: holder.value for job, holder in _HOSTS.items()}
    counts_given = [n for n in ("num_ps", "num_workers", "chief", "evaluator") if flags.FLAGS[n].present]
    if any(hosts.values()):
        if counts_given:
            raise ConfigError(f"--{counts_given[0]} and --*_hosts both given; give counts or addresses")
        topology = Topology(hosts=hosts_from_flags(**{f"{job}_hosts": text for job, text in hosts.items()}))
    else:
        topology = Topology(
            num_ps=_NUM_PS.value, num_workers=_NUM_WORKERS.value, chief=_CHIEF.value, evaluator=_EVALUATOR.value
        )
    if not command:
        if _TASK_ARGS.value not in (None, task_plan.NO_TASK_ARGS):
            raise ConfigError(
                f"--task_args={_TASK_ARGS.value!r} is for a command after --; run_task.py takes its flags"
            )
        _check_training(topology)
    run_dir = local.make_run_dir(flags.FLAGS.log_dir or None)
    return local.LaunchOptions(
        topology=topology,
        command=tuple(command) if command else tuple(default_command(_train_args(run_dir))),
        log_dir=run_dir,
        quiet=_QUIET.value,
        chart=_CHART.value,
        start_method=_START_METHOD.value,
        chief_role=_CHIEF_ROLE.value,
        task_args=_TASK_ARGS.value,
        policy=Policy(
            success_policy=_SUCCESS.value,
            grace_secs=_GRACE.value,
            ps_grace_secs=_PS_GRACE.value,
            stop_grace_secs=_STOP_GRACE.value,
            restart=_RESTART.value,
            max_restarts=_MAX_RESTARTS.value,
            kills=tuple(parse_kill(text) for text in _KILL.value),
            timeout_secs=_TIMEOUT.value,
            success_pattern=_SUCCESS_PATTERN.value,
        ),
    )


def _check_training(topology: Topology) -> None:
    """Refuses, before any task starts, what every task would refuse or what cannot train together:
    the training flags checked against the cluster, and replicas without a ps."""
    jobs = topology.jobs_for_ports(range(1, topology.num_tasks + 1))
    chief_job = "chief" if "chief" in jobs else "worker"
    hosts = {f"{job}_hosts": ",".join(jobs[job]) for job in ("ps", "worker", "chief", "evaluator") if job in jobs}
    cluster = cluster_lib.ClusterConfig.from_host_flags(
        **{"ps_hosts": None, "worker_hosts": None, **hosts},
        job_name=chief_job,
        task_index=0,
    )
    config = cli.train_config_from_flags()
    if config.checkpoint_dir is None:
        config = cli.with_checkpoint_dir(config, "run-folder/checkpoints")
    config.validate(cluster)
    source = "--ps_hosts" if topology.hosts is not None else f"--num_ps={topology.num_ps}"
    preflight.check_topology(cluster, source)
    preflight.check_data_dir(config.data_dir)


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
    command = argv[split + 1 :]
    _start_fork_server_early(command)
    return command


def _start_fork_server_early(command: list[str]) -> None:
    """Starts this launch's fork server as soon as the flags say its tasks are forked from one.

    The server's TensorFlow import is the longest wait of a launch: it runs while the launch checks
    its flags and reserves its ports. Its environment is the tasks' (task_env), so the tasks are
    forked from it; a launch that ends before its first task kills it at exit.
    """
    if command or _START_METHOD.value != "fork" or _BACKEND.value != "local":
        return
    fork_starter.shared_server(task_plan.task_env())


def _fail(message: str) -> None:
    print(f"launch_local.py: {message}", file=sys.stderr)
    sys.exit(EXIT_CONFIG)


def _isolate(topology) -> dict[str, str]:
    """Enters a private network namespace as --isolation says; the variables that tell the tasks."""
    # Tasks inherit this environment: a value from an outer launch must not vouch for this one.
    os.environ.pop(netns.PRIVATE_NETWORK_ENV, None)
    if _ISOLATION.value == "none":
        return {}
    # The namespace has nothing but loopback: an address of a real interface would not exist in it.
    task_addresses = [a for hosts in (topology.hosts or {}).values() for a in hosts]
    outside = [a for a in task_addresses if not addresses.is_loopback_host(a.rsplit(":", 1)[0].strip("[]"))]
    try:
        if outside:
            raise netns.NamespaceUnavailable(f"{outside[0]} from --*_hosts is not a loopback address")
        kind = netns.enter_private_network()
    except netns.NamespaceUnavailable as err:
        if _ISOLATION.value == "netns":
            _fail(f"--isolation=netns: cannot isolate the tasks: {err}")
        print(
            f"launch_local.py: warning: no private network for the tasks ({err}): anyone who can reach "
            "their ports can use them, every local user included (--isolation=none says this is intended)",
            file=sys.stderr,
        )
        return {}
    print(f"launch_local.py: the tasks run in a private {kind}; their ports are unreachable from outside it")
    return {netns.PRIVATE_NETWORK_ENV: "1"}


def launch(command: list[str]) -> int:
    """Runs the cluster the flags describe (with ``command`` after ``--``, or the toolkit's tasks); its exit status."""
    try:
        options = options_from_flags(command)
        # Refused before the network is touched: a name no backend has, or one that needs its own tool's flags.
        backend = registry.usable(_backend_name(_BACKEND.value), None, "--backend")
    except ConfigError as err:
        _fail(str(err))
    options = dataclasses.replace(options, env={**(options.env or {}), **_isolate(options.topology)})
    private = options.env.get(netns.PRIVATE_NETWORK_ENV) == "1"
    if command and not private and not open_ports.open_ports_allowed(flags.FLAGS.allow_open_ports):
        # run_task.py tasks guard their own ports; a command of the user's binds its own, unguarded.
        _fail(
            "without a private network namespace the command's ports would be open on every interface, "
            "unauthenticated: give --allow_open_ports if this machine's network is private"
        )
    if options.chart:  # after _isolate: a user namespace can only be entered while this process has one thread
        charts.warm_up()
    given = f"--backend={_BACKEND.value}"
    try:
        if registry.is_built_in(_BACKEND.value):
            result = backend(options, None)
        else:  # a user's backend: what it raises is reported as theirs, in one line
            result = user_calls.call(backend, given, options, None)
        return _exit_code(result, given)
    except ConfigError as err:
        _fail(str(err))


def _exit_code(result, given: str) -> int:
    """A backend's result (a RunResult, or an exit status 0-255) as this command's exit status."""
    code = getattr(result, "exit_code", result)
    if isinstance(code, bool) or not isinstance(code, int) or not 0 <= code <= 255:
        raise ConfigError(f"{given}: returned {result!r}, not a RunResult or an exit status 0-255")
    return code


def _backend_name(text: str) -> str:
    """The registry name of --backend: a MODULE:FUNCTION given there is imported and registered under that text."""
    if ":" in text and text not in registry.names():
        registry.register_backend(text, user_code.load(text, "backend"))
    return text


def _main_and_exit(command: list[str]) -> None:
    """main(), then the exit without the interpreter's teardown (a second with matplotlib and psutil
    loaded on a busy machine): the fork server is ended and reaped, every output flushed."""
    code = launch(command)
    fork_starter.close_shared()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main() -> None:
    """The ``ps-launch-local`` command."""
    cli.register_key_flags_for_program(__name__)
    app.run(_main_and_exit, flags_parser=_parse)


if __name__ == "__main__":
    main()
