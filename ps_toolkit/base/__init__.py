"""Leaf utilities every layer may use.

The exit-status contract, environment errors, flag ranges, private state paths, the TensorFlow
import.
"""
