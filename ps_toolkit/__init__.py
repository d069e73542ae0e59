"""ps_toolkit: TF1-style parameter-server training on today's TensorFlow."""

__version__ = "0.1.0"
