"""The role loops of a task, side by side: ps (serve), chief and worker (train), evaluator (evaluate)."""
