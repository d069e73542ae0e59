"""Runs a parameter-server cluster on this machine: one process per task, on loopback.

    python scripts/launch_local.py                     # 1 ps + 2 workers, async, default model
    python scripts/launch_local.py --num_ps=2 --num_workers=3 --sync_replicas --train_steps=500
    python scripts/launch_local.py --chief --evaluator -- python my_tf1_script.py --data_dir=/data
    python scripts/launch_local.py --restart=on-failure --kill=ps:0@5s   # a chaos drill
    python scripts/launch_local.py --isolation=none    # plain loopback, ports reachable from this machine

Without a command after ``--`` every task runs scripts/run_task.py with the
training flags given here. With one, every task runs that command with
``--ps_hosts=... --worker_hosts=... --job_name=... --task_index=...`` appended
and TF_CONFIG set. TensorFlow's servers listen on every interface, unauthenticated,
so by default (--isolation=auto) the tasks run in a private network namespace
with only a loopback of its own (see ps_toolkit/netns.py); where none can be
made the launcher says so in one warning line and uses this machine's loopback.
Exit status: 0 when the run succeeded under
--success_policy; otherwise the failed task's status (2 for bad flags here).
"""

from __future__ import annotations

import dataclasses
import os
import sys

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ps_toolkit import launcher, netns  # noqa: E402
from ps_toolkit.drills import parse_kill  # noqa: E402
from ps_toolkit.errors import EXIT_CONFIG, ConfigError  # noqa: E402
from ps_toolkit.supervisor import RESTART_POLICIES, SUCCESS_POLICIES, Policy  # noqa: E402
from ps_toolkit.task_plan import Topology, default_command, hosts_from_flags  # noqa: E402

_NUM_PS = flags.DEFINE_integer("num_ps", 1, "Parameter server tasks.")
_NUM_WORKERS = flags.DEFINE_integer("num_workers", 2, "Worker tasks.")
_CHIEF = flags.DEFINE_boolean("chief", False, "Add a chief task (else worker 0 is the chief).")
_EVALUATOR = flags.DEFINE_boolean("evaluator", False, "Add an evaluator task.")
_HOSTS = {
    job: flags.DEFINE_string(f"{job}_hosts", None, f"Explicit {job} addresses host:port,... instead of counts.")
    for job in ("ps", "worker", "chief", "evaluator")
}
# --log_dir (the run folder: task logs, chart, summary; default a fresh temp dir) is
# absl.logging's own flag, reused: defining it again would clash.
_QUIET = flags.DEFINE_boolean("quiet", False, "Console shows only status and summary, not task output.")
_SUCCESS = flags.DEFINE_enum(
    "success_policy", "chief", SUCCESS_POLICIES, "chief: the chief's status 0 ends the run; all_workers."
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
    "fork: one process imports TensorFlow once and forks the toolkit's tasks (run_task.py, run_legacy.py); "
    "exec: every task is a fresh process. Other commands after -- are always exec'd.",
)
_ISOLATION = flags.DEFINE_enum(
    "isolation",
    "auto",
    ("auto", "netns", "none"),
    "Run the tasks in a private network namespace, unreachable from outside it. auto: when possible, "
    "else warn and use loopback; netns: required (exit 2 if impossible); none: plain loopback.",
)

# Passed through to scripts/run_task.py, only when given.
_TRAIN_FLAGS = {
    "model": flags.DEFINE_string("model", None, "run_task.py --model."),
    "data_dir": flags.DEFINE_string("data_dir", None, "run_task.py --data_dir."),
    "train_steps": flags.DEFINE_integer("train_steps", None, "run_task.py --train_steps."),
    "batch_size": flags.DEFINE_integer("batch_size", None, "run_task.py --batch_size."),
    "learning_rate": flags.DEFINE_float("learning_rate", None, "run_task.py --learning_rate."),
    "sync_replicas": flags.DEFINE_boolean("sync_replicas", None, "run_task.py --sync_replicas."),
    "replicas_to_aggregate": flags.DEFINE_integer("replicas_to_aggregate", None, "run_task.py flag."),
    "checkpoint_dir": flags.DEFINE_string("checkpoint_dir", None, "run_task.py flag (default: run folder)."),
    "save_checkpoint_steps": flags.DEFINE_integer("save_checkpoint_steps", None, "run_task.py flag."),
    "save_checkpoint_secs": flags.DEFINE_float("save_checkpoint_secs", None, "run_task.py flag."),
    "save_summaries_steps": flags.DEFINE_integer("save_summaries_steps", None, "run_task.py flag."),
    "partition_variables": flags.DEFINE_boolean("partition_variables", None, "run_task.py flag."),
    "readiness_poll_secs": flags.DEFINE_float("readiness_poll_secs", None, "run_task.py flag."),
    "steps_per_run": flags.DEFINE_integer("steps_per_run", None, "run_task.py --steps_per_run."),
    "placement": flags.DEFINE_string("placement", None, "run_task.py --placement."),
    "compute_near_weights": flags.DEFINE_string("compute_near_weights", None, "run_task.py flag: auto, all, none."),
    "pack_transfers": flags.DEFINE_boolean("pack_transfers", None, "run_task.py flag."),
    "seed": flags.DEFINE_integer("seed", None, "run_task.py --seed."),
    "ps_orphan_timeout_secs": flags.DEFINE_float("ps_orphan_timeout_secs", None, "run_task.py flag."),
    "watchdog_secs": flags.DEFINE_float("watchdog_secs", None, "run_task.py --watchdog_secs."),
}


def _train_args(run_dir: str) -> list[str]:
    args = []
    for name, holder in _TRAIN_FLAGS.items():
        if not flags.FLAGS[name].present:
            continue
        value = holder.value
        if isinstance(value, bool):
            args.append(f"--{name}" if value else f"--no{name}")
        else:
            args.append(f"--{name}={value}")
    if not flags.FLAGS["checkpoint_dir"].present:
        args.append(f"--checkpoint_dir={os.path.join(run_dir, 'checkpoints')}")
    return args


def _options(command: list[str]) -> launcher.LaunchOptions:
    given = [name for name in _TRAIN_FLAGS if flags.FLAGS[name].present]
    if command and given:
        raise ConfigError(
            f"--{given[0]} is a scripts/run_task.py flag; with a command after --, give it to the command"
        )
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
    run_dir = launcher.make_run_dir(flags.FLAGS.log_dir or None)
    return launcher.LaunchOptions(
        topology=topology,
        command=tuple(command) if command else tuple(default_command(_train_args(run_dir))),
        log_dir=run_dir,
        quiet=_QUIET.value,
        start_method=_START_METHOD.value,
        policy=Policy(
            success_policy=_SUCCESS.value,
            grace_secs=_GRACE.value,
            ps_grace_secs=_PS_GRACE.value,
            stop_grace_secs=_STOP_GRACE.value,
            restart=_RESTART.value,
            max_restarts=_MAX_RESTARTS.value,
            kills=tuple(parse_kill(text) for text in _KILL.value),
            timeout_secs=_TIMEOUT.value,
        ),
    )


def _parse(argv: list[str]) -> list[str]:
    """absl flags before ``--``; the command after it. Bad flags: one line, exit 2."""
    split = argv.index("--") if "--" in argv else len(argv)
    try:
        rest = flags.FLAGS(argv[:split])
    except flags.Error as err:
        _fail(str(err))
    if len(rest) > 1:
        _fail(f"unexpected argument {rest[1]!r}; put the task command after --")
    return argv[split + 1 :]


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
    outside = [a for hosts in (topology.hosts or {}).values() for a in hosts if not _is_loopback(a)]
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


def _is_loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]")
    return host == "localhost" or host.startswith("127.") or host == "::1"


def main(command: list[str]) -> int:
    try:
        options = _options(command)
    except ConfigError as err:
        _fail(str(err))
    options = dataclasses.replace(options, env={**(options.env or {}), **_isolate(options.topology)})
    return launcher.launch(options).exit_code


if __name__ == "__main__":
    app.run(main, flags_parser=_parse)
