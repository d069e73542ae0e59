"""One task of a Ray launch, as the launcher's ClusterSupervisor sees it: a local process standing for a Ray actor.

    python -m ps_toolkit.backends.ray.task --address=GCS --namespace=NS --placement_group=NAME --bundle=I
        --num_cpus=1 --num_gpus=0 --launcher_python=PATH --env_keys=TF_CONFIG,... -- COMMAND...
    python -m ps_toolkit.backends.ray.task ... --node_id=ID --ready_secs=S -- COMMAND...   # an elastic worker

It connects to the Ray cluster, creates the task's actor in its bundle of the
launch's placement group (the node that holds its port), runs COMMAND there and
writes what the task prints to its own stdout (the task's log in the run
folder). It exits as the task did: its status, or killed by the same signal, so
the ClusterSupervisor's verdict, restarts and summary are the local launcher's. SIGTERM
or SIGINT is passed on to the task; the actor is owned by this process, so if
this process is killed (a drill, the launcher's SIGKILL after the grace period)
Ray ends the actor and the task with it.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from ps_toolkit.backends.ray.nodes import TaskActor
from ps_toolkit.base.errors import EXIT_RETRYABLE

# How often the main thread wakes to handle signals while the task runs.
_WAKE_SECS = 0.5
# Said when the actor dies under the task (its node or worker process lost): the task then ends with
# status 200, which --restart=on-failure restarts.
_LOST = "the task's Ray actor was lost (its node or worker process died)"


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="ray_task")
    for name in ("address", "namespace", "launcher_python", "env_keys", "cwd"):
        parser.add_argument(f"--{name}", required=True)
    # Either a bundle of the launch's placement group, or (an elastic worker) the node that holds its port.
    parser.add_argument("--placement_group")
    parser.add_argument("--node_id")
    parser.add_argument("--ready_secs", type=float, default=None)
    parser.add_argument("--bundle", type=int, default=0)
    parser.add_argument("--num_cpus", type=float, required=True)
    parser.add_argument("--num_gpus", type=float, default=0.0)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if (args.placement_group is None) == (args.node_id is None):
        parser.error("give one of --placement_group and --node_id")
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    return args


def run(args: argparse.Namespace) -> int:
    """Runs the task's actor to its end; its exit status (-N: killed by signal N)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

    ray.init(address=args.address, namespace=args.namespace, log_to_driver=False, logging_level="WARNING")
    if args.node_id is not None:
        where = NodeAffinitySchedulingStrategy(args.node_id, soft=False)
    else:
        group = ray.util.get_placement_group(args.placement_group)
        where = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=args.bundle)
    actor = (
        ray.remote(TaskActor)
        .options(
            num_cpus=args.num_cpus,
            num_gpus=args.num_gpus,
            max_concurrency=2,  # signal() while run() streams
            scheduling_strategy=where,
        )
        .remote()
    )
    if args.ready_secs is not None:
        try:  # an actor outside the placement group waits for free resources on its node: bounded
            ray.get(actor.pid.remote(), timeout=args.ready_secs)
        except ray.exceptions.GetTimeoutError:
            print(f"ray_task: no room on node {args.node_id} within {args.ready_secs:g}s", file=sys.stderr, flush=True)
            return EXIT_RETRYABLE
    env = {key: os.environ[key] for key in args.env_keys.split(",") if key in os.environ}
    status: list[int] = []
    done = threading.Event()

    def pump() -> None:
        try:
            for ref in actor.run.remote(args.command, env, args.launcher_python, args.cwd):
                item = ray.get(ref)
                if isinstance(item, bytes):
                    sys.stdout.buffer.write(item)
                    sys.stdout.buffer.flush()
                else:
                    status.append(item)
        except ray.exceptions.RayError as err:
            print(f"ray_task: {_LOST}: {type(err).__name__}", file=sys.stderr, flush=True)
            status.append(EXIT_RETRYABLE)
        finally:
            done.set()

    def pass_on(signum, frame) -> None:
        actor.signal.remote(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, pass_on)
    threading.Thread(target=pump, name="ray-task-output", daemon=True).start()
    while not done.wait(_WAKE_SECS):
        pass
    return status[0] if status else EXIT_RETRYABLE


def main(argv: list[str] | None = None) -> None:
    code = run(_parse(sys.argv[1:] if argv is None else argv))
    sys.stdout.flush()
    if code < 0:  # killed by a signal: end the same way, so the launcher reports the same cause
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)  # without Ray's teardown at exit, which can take seconds; the actor ends with its owner


if __name__ == "__main__":
    main()
