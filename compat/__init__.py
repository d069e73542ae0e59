"""The legacy TensorFlow 1.x surface that lets old scripts run unchanged (see scripts/run_legacy.py)."""
