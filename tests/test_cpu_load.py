"""The benchmark's CPU burners (--load_procs): started on entry, each one ended and reaped on exit."""

import psutil
import pytest

from benchmarks import cpu_load, measure


def test_burners_run_inside_and_are_all_ended_on_exit():
    with cpu_load.CpuLoad(2) as load:
        pids = load.pids
        assert len(pids) == 2
        assert all(psutil.Process(pid).is_running() for pid in pids)
    assert not [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]


def test_burners_are_ended_when_the_benchmark_fails_inside():
    with pytest.raises(RuntimeError), cpu_load.CpuLoad(1) as load:
        pids = load.pids
        raise RuntimeError("a run failed")
    assert not [pid for pid in pids if psutil.pid_exists(pid)]


def test_no_burners_and_a_negative_count_refused():
    with cpu_load.CpuLoad(0) as load:
        assert load.pids == []
    with pytest.raises(ValueError, match="load_procs=-1"):
        cpu_load.CpuLoad(-1)


def test_a_summary_gives_the_runs_load_averages_and_done_spreads_as_min_and_max():
    base = dict(steps_per_sec=1.0, startup_s=1.0, shutdown_s=1.0, killed=(), accuracy=None, final_global_step=1)
    runs = [measure.RunFigures(**base, load_average=value) for value in (9.5, 8.1, 12.0)]
    assert measure.summarize(runs)["load_average"] == [8.1, 12.0]
    assert measure.summarize([measure.RunFigures(**base)])["load_average"] is None
    spread = [measure.RunFigures(**base, done_spread_s=value) for value in (0.5, 9.25)]
    assert measure.summarize(spread)["done_spread_s"] == [0.5, 9.25]
