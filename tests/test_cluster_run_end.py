"""The benchmark's end of a run: training is over at the last replica's ``done`` (bounded), then the exit grace."""

import json

from benchmarks import protocol
from benchmarks.cluster_run import Task, run_cluster


def marker(event):
    return protocol.MARKER + json.dumps({"event": event, "time": 0, "global_step": 1})


def test_cluster_run_with_replica_end_waits_for_every_replicas_done_before_the_exit_grace():
    # worker0 is done at once; worker1 (a chief's final save and evaluation) prints its done 2 s later,
    # past the 0.5 s exit grace: with replica_end_s the grace starts at the last done, so nothing is killed.
    # worker0 starts once worker1 trains (as replicas train side by side for many steps before a done).
    quick_code = f"print({marker('first_step')!r}); print({marker('done')!r})"
    quick = Task("worker0", ["-c", quick_code], start_after=("worker1", "first_step"))
    slow_code = f"import time; print({marker('first_step')!r}, flush=True); time.sleep(2); print({marker('done')!r})"
    slow = Task("worker1", ["-c", slow_code])
    outcome = run_cluster([quick, slow], timeout_s=60, exit_grace_s=0.5, replica_end_s=30)
    assert not [r.task.name for r in outcome.results.values() if r.killed]
    assert outcome.results["worker1"].returncode == 0
    # Without it the run is over at the first done, and the slow replica is killed after the grace.
    outcome = run_cluster([quick, slow], timeout_s=60, exit_grace_s=0.5)
    assert outcome.results["worker1"].killed


def test_cluster_run_bounds_its_wait_for_a_replica_that_never_prints_done():
    quick_code = f"print({marker('first_step')!r}); print({marker('done')!r})"
    quick = Task("worker0", ["-c", quick_code], start_after=("worker1", "first_step"))
    hung_code = f"import threading; print({marker('first_step')!r}, flush=True); threading.Event().wait()"
    hung = Task("worker1", ["-c", hung_code])
    outcome = run_cluster([quick, hung], timeout_s=60, exit_grace_s=0.5, replica_end_s=1.0)
    assert outcome.results["worker1"].killed and not outcome.results["worker0"].killed
