"""Runs a parameter-server cluster on this machine: one process per task, on loopback.

    python scripts/launch_local.py                     # 1 ps + 2 workers, async, default model
    python scripts/launch_local.py --num_ps=2 --num_workers=3 --sync_replicas --train_steps=500
    python scripts/launch_local.py --chief --evaluator -- python my_tf1_script.py --data_dir=/data
    python scripts/launch_local.py --restart=on-failure --kill=ps:0@5s   # a chaos drill

Without a command after ``--`` every task runs scripts/run_task.py with the
training flags given here. With one, every task runs that command with
``--ps_hosts=... --worker_hosts=... --job_name=... --task_index=...`` appended
and TF_CONFIG set. Exit status: 0 when the run succeeded under
--success_policy; otherwise the failed task's status (2 for bad flags here).
"""

from __future__ import annotations

import os
import sys

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ps_toolkit import launcher  # noqa: E402
from ps_toolkit.drills import parse_kill  # noqa: E402
from ps_toolkit.errors import EXIT_CONFIG, ConfigError  # noqa: E402
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
    "success_policy", "chief", launcher.SUCCESS_POLICIES, "chief: the chief's status 0 ends the run; all_workers."
)
_GRACE = flags.DEFINE_float("grace_secs", 10.0, "After success, time the other workers get to end by themselves.")
_PS_GRACE = flags.DEFINE_float("ps_grace_secs", 5.0, "Then the time parameter servers get to end by themselves.")
_STOP_GRACE = flags.DEFINE_float("stop_grace_secs", 5.0, "Between SIGTERM and SIGKILL when a task is stopped.")
_RESTART = flags.DEFINE_enum("restart", "never", launcher.RESTART_POLICIES, "Restart failed tasks in place.")
_MAX_RESTARTS = flags.DEFINE_integer("max_restarts", 3, "Restarts allowed per task with --restart=on-failure.")
_KILL = flags.DEFINE_multi_string("kill", [], "Chaos drill JOB:INDEX@SECONDS, e.g. ps:0@5s: SIGKILL it then.")
_TIMEOUT = flags.DEFINE_float("timeout_secs", None, "Stop everything and fail if the run lasts longer.")

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
    "placement": flags.DEFINE_string("placement", None, "run_task.py --placement."),
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
        success_policy=_SUCCESS.value,
        grace_secs=_GRACE.value,
        ps_grace_secs=_PS_GRACE.value,
        stop_grace_secs=_STOP_GRACE.value,
        restart=_RESTART.value,
        max_restarts=_MAX_RESTARTS.value,
        kills=tuple(parse_kill(text) for text in _KILL.value),
        timeout_secs=_TIMEOUT.value,
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


def main(command: list[str]) -> int:
    try:
        options = _options(command)
    except ConfigError as err:
        _fail(str(err))
    return launcher.launch(options).exit_code


if __name__ == "__main__":
    app.run(main, flags_parser=_parse)
