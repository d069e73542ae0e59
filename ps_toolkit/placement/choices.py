"""The placement levers' names and size limit, importable before TensorFlow (flags and configs check them)."""

# Which fully connected layers run on the ps holding their weights (``near_weights.near_rule``).
NEAR_WEIGHTS_MODES = ("auto", "all", "none")
# Variables up to this size are pulled and pushed whole, packed per ps; larger ones stay on their ps.
PACK_LIMIT_BYTES = 1 << 20
