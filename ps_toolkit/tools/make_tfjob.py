"""Writes Kubernetes manifests for a parameter-server cluster: a Kubeflow TFJob, plain objects or a Volcano Job.

    python scripts/make_tfjob.py --num_ps=1 --num_workers=2 --image=registry.local/ps_toolkit:1 \\
        --train_steps=1000 --checkpoint_pvc=ckpt > tfjob.yaml && kubectl apply -f tfjob.yaml
    python scripts/make_tfjob.py --plain ...   # headless Service + one Indexed Job per role
    python scripts/make_tfjob.py --volcano ... # a Volcano Job, TF_CONFIG from its tensorflow plugin

Training flags given here are passed to every task (scripts/run_task.py in the
image, see --command). Bad flags: one line on stderr and exit status 2.
"""

from __future__ import annotations

import shlex
import sys

from absl import flags

from ps_toolkit import cli
from ps_toolkit.backends import kubernetes, registry

_NUM_PS = flags.DEFINE_integer("num_ps", 1, "Parameter server replicas.")
_NUM_WORKERS = flags.DEFINE_integer("num_workers", 2, "Worker replicas.")
_CHIEF = flags.DEFINE_boolean("chief", False, "Add a Chief replica (else worker 0 is the chief).")
_EVALUATOR = flags.DEFINE_boolean("evaluator", False, "Add an Evaluator replica (needs shared checkpoints).")
_IMAGE = flags.DEFINE_string("image", None, "Container image with this repository and its dependencies.")
_NAME = flags.DEFINE_string("name", "ps-toolkit", "Name of the TFJob (plain: of the Service; Jobs get -<role>).")
_NAMESPACE = flags.DEFINE_string("namespace", "default", "Kubernetes namespace.")
_COMMAND = flags.DEFINE_string("command", "python /app/scripts/run_task.py", "The task command in the image.")
_PORT = flags.DEFINE_integer("port", kubernetes.DEFAULT_PORT, "The gRPC port of every task.")
_RESTART = flags.DEFINE_enum(
    "restart_policy", "OnFailure", list(kubernetes.RESTART_POLICIES), "Replica restart policy."
)
_BACKOFF = flags.DEFINE_integer("backoff_limit", 3, "Restarts before the job is marked failed.")
_PVC = flags.DEFINE_string("checkpoint_pvc", None, "PersistentVolumeClaim mounted in every pod for checkpoints.")
_MOUNT = flags.DEFINE_string("checkpoint_mount", "/checkpoints", "Where --checkpoint_pvc is mounted.")
_DOMAIN = flags.DEFINE_string("cluster_domain", None, "Plain: DNS suffix after .svc, e.g. cluster.local.")
_PLAIN = flags.DEFINE_boolean("plain", False, "Plain Kubernetes objects instead of a Kubeflow TFJob.")
_VOLCANO = flags.DEFINE_boolean("volcano", False, "A Volcano Job (its tensorflow plugin) instead of a TFJob.")

# Every training flag run_task.py knows, validated here and passed on when given.
_BEFORE = set(flags.FLAGS)
cli.define_training_flags()
flags.adopt_module_key_flags(cli)  # --help lists them as this script's own
TRAINING_FLAGS = sorted(set(flags.FLAGS) - _BEFORE)


def task_args() -> list[str]:
    args = [flags.FLAGS[name].serialize() for name in TRAINING_FLAGS if flags.FLAGS[name].present]
    if not flags.FLAGS["checkpoint_dir"].present:
        if _PVC.value:
            args.append(f"--checkpoint_dir={_MOUNT.value.rstrip('/')}/{_NAME.value}")
        elif _EVALUATOR.value:
            cli.fail("--evaluator reads the chief's checkpoints: give --checkpoint_pvc or a shared --checkpoint_dir")
    return args


def _main(argv):
    if len(argv) > 1:
        cli.fail(f"unexpected arguments {' '.join(argv[1:])!r}; flags look like --name=value")
    if not _IMAGE.value:
        cli.fail("--image is required: the container image that holds ps_toolkit")
    if _PLAIN.value and _VOLCANO.value:
        cli.fail("--plain and --volcano: give one (or neither, for a TFJob)")
    if _NUM_PS.value < 0 or _NUM_WORKERS.value < 0:
        cli.fail(f"--num_ps={_NUM_PS.value} --num_workers={_NUM_WORKERS.value} must not be negative")
    roles = (("chief", int(_CHIEF.value)), ("ps", _NUM_PS.value), ("worker", _NUM_WORKERS.value))
    with cli.user_errors():
        spec = kubernetes.KubeSpec(
            name=_NAME.value,
            image=_IMAGE.value,
            roles=roles + (("evaluator", int(_EVALUATOR.value)),),
            command=tuple(shlex.split(_COMMAND.value)),
            task_args=tuple(task_args()),
            namespace=_NAMESPACE.value,
            port=_PORT.value,
            restart_policy=_RESTART.value,
            backoff_limit=_BACKOFF.value,
            checkpoint_pvc=_PVC.value,
            checkpoint_mount=_MOUNT.value,
            cluster_domain=_DOMAIN.value,
        )
    backend = "volcano" if _VOLCANO.value else "kubernetes"
    manifests = registry.run(backend, None, {"spec": spec, "plain": _PLAIN.value})
    sys.stdout.write(f"# Written by: make_tfjob.py {' '.join(shlex.quote(a) for a in sys.argv[1:])}\n")
    sys.stdout.write(manifests)


def main() -> None:
    """The ``ps-make-tfjob`` command."""
    cli.run_tool(_main, __name__)


if __name__ == "__main__":
    main()
