"""Where variables and computation go: ps placement strategies, the near-weights rule, and layers that apply it."""
