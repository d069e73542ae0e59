"""Multi-host deployment files: Kubernetes manifests and Slurm batch scripts."""
