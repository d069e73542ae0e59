"""Launch backends: one module (or subpackage) per way to run a cluster, found by name in ``registry``."""
