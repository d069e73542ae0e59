"""One task's life.

Its server and network guard, its sessions, the monitored training loop, checkpoints, the
watchdog and the step guard.
"""
