"""The command line of the reference tasks (raw TF1, TF2, one process); ps_toolkit takes run_task.py's."""

from __future__ import annotations

from absl import flags

PS_HOSTS = flags.DEFINE_string("ps_hosts", "", "Comma-separated ps addresses.")
WORKER_HOSTS = flags.DEFINE_string("worker_hosts", "", "Comma-separated worker addresses.")
JOB_NAME = flags.DEFINE_string("job_name", "worker", "ps or worker.")
TASK_INDEX = flags.DEFINE_integer("task_index", 0, "Index of this task in its job.")
MODEL = flags.DEFINE_enum("model", "softmax", ["softmax", "mlp", "wide", "embedding"], "Benchmarked model.")
TRAIN_STEPS = flags.DEFINE_integer("train_steps", 1000, "Global steps.")
SYNC = flags.DEFINE_boolean("sync_replicas", False, "Synchronous training (SyncReplicasOptimizer).")
WARMUP_STEPS = flags.DEFINE_integer("warmup_steps", None, "Global step where timing starts; default 20% of the run.")
CHECKPOINT_DIR = flags.DEFINE_string("checkpoint_dir", None, "Where the chief checkpoints.")


def hosts(flag) -> list[str]:
    return [h for h in flag.value.split(",") if h]
