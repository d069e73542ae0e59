"""The Ray backend: one Ray actor per task, supervised by the local launcher's attempt loop."""
