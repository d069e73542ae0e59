"""The lines a task prints for its launcher to read: each progress record is this prefix and one JSON object."""

PROGRESS_PREFIX = "ps_toolkit progress: "
