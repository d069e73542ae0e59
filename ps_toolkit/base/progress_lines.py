"""The lines a task prints for its launcher to read: each progress record is this prefix and one JSON object;
lines with the log-only prefix (a user error's traceback) stay in the task's log, off the console."""

PROGRESS_PREFIX = "ps_toolkit progress: "
LOG_ONLY_PREFIX = "ps_toolkit log only: "
# The cluster flags a launcher appended to a task's command (a JSON list), for the task to recognise as its own.
CLUSTER_ARGS_ENV = "PS_TOOLKIT_CLUSTER_ARGS"
