"""Local clusters: the launcher, its supervisor, task plans, output, status and charts, and LocalCluster for tests."""
