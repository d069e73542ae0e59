"""The command line of the reference tasks (raw TF1, TF2, one process); ps_toolkit takes run_task.py's."""

from __future__ import annotations

from absl import flags

PS_HOSTS = flags.DEFINE_string("ps_hosts", "", "Comma-separated ps addresses.")
WORKER_HOSTS = flags.DEFINE_string("worker_hosts", "", "Comma-separated worker addresses.")
JOB_NAME = flags.DEFINE_string("job_name", "worker", "ps or worker.")
TASK_INDEX = flags.DEFINE_integer("task_index", 0, "Index of this task in its job.")
MODEL = flags.DEFINE_enum("model", "softmax", ["softmax", "mlp", "wide", "embedding", "ctr"], "Benchmarked model.")
TRAIN_STEPS = flags.DEFINE_integer("train_steps", 1000, "Global steps.")
SYNC = flags.DEFINE_boolean("sync_replicas", False, "Synchronous training (SyncReplicasOptimizer).")
WARMUP_STEPS = flags.DEFINE_integer("warmup_steps", None, "Global step where timing starts; default 20% of the run.")
CHECKPOINT_DIR = flags.DEFINE_string("checkpoint_dir", None, "Where the chief checkpoints.")
# The ctr model's variant (ps_toolkit takes the same as --params).
CTR_IDS = flags.DEFINE_string("ctr_ids", "zipf1.05", "ctr: the id law (benchmarks.ctr_data.ID_LAWS).")
CTR_TABLES = flags.DEFINE_enum("ctr_tables", "per_field", ["per_field", "shared"], "ctr: a table per field, or one.")
CTR_VOCAB = flags.DEFINE_integer("ctr_vocab", 1_000_000, "ctr: ids per field.")
CTR_DIM = flags.DEFINE_integer("ctr_dim", 8, "ctr: embedding width.")
AUC_STEP = flags.DEFINE_integer(
    "auc_step", None, "ctr, raw script: the chief evaluates AUC once past this global step."
)


def hosts(flag) -> list[str]:
    return [h for h in flag.value.split(",") if h]
