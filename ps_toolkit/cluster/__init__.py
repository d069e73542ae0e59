"""The cluster as data.

Jobs, tasks and addresses from flags, TF_CONFIG or Slurm, and the checks made before TensorFlow
starts.
"""
