"""A Cloud ML Engine style trainer package, run as ``python -m trainer.task`` from its parent folder."""
