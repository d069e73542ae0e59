"""The built-in models' names, importable before TensorFlow (the ``--model`` flag lists them)."""

MODEL_NAMES = ("softmax", "mlp", "wide", "cnn")
