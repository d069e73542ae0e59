"""benchmarks/run_summary.py (corpus_under_load.py's reader) reads each task's end from the launcher's summary table."""

from benchmarks import run_summary

SUMMARY = """task      address          exit status        restarts  run time  steps
--------  ---------------  -----------------  --------  --------  -----
ps:0      localhost:32049  0 (finished)       0         0.7s      -
chief:0   localhost:16598  0 (finished)       0         4.3s      20
worker:0  localhost:10286  SIGTERM (stopped)  0         62.0s     622

succeeded: the chief (chief:0) finished with status 0
"""


def test_each_tasks_exit_status_is_read_from_the_summary_table():
    ends = run_summary.task_ends(SUMMARY)
    assert ends == {"ps:0": "0 (finished)", "chief:0": "0 (finished)", "worker:0": "SIGTERM (stopped)"}


def test_a_summary_without_its_table_gives_no_ends():
    assert run_summary.task_ends("launcher: FAILED: no task started\n") == {}
