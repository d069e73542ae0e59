"""Built-in MNIST models: model_fns of the public seam, and their data (IDX files, the embedded digits)."""
