"""TFRA's graph-mode ``dynamic_embedding`` surface over ps_toolkit's dynamic tables; ``install.install()`` serves it."""
