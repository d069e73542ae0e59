"""One task's life.

Its one start-up sequence (startup.py), its server, its role loops side by side
(roles/: ps, chief/worker, evaluator), sessions, checkpoints, the watchdog and
its full-disk-tolerant output streams. Network protection lives in ps_toolkit.network.
"""
