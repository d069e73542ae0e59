"""The training seam and one replica's graph.

The model_fn/input_fn contract, optimizers, async and sync steps, multi-step loops, packed
transfers, hooks, evaluation, export.
"""
