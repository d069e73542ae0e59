"""The benchmark's CPU and byte counts at a marker's own time: interpolation on the sampled series."""

from __future__ import annotations

import os
import types

import pytest

from benchmarks.cluster_run import Task, TaskResult, _Run
from benchmarks.resource_clock import ResourceClock, interpolate, interpolate_cpu


def test_interpolate_between_and_outside_samples():
    times, values = [10.0, 11.0, 13.0], [0.0, 2.0, 3.0]
    assert interpolate(times, values, 10.5) == pytest.approx(1.0)
    assert interpolate(times, values, 12.0) == pytest.approx(2.5)
    assert interpolate(times, values, 13.0) == pytest.approx(3.0)
    assert interpolate(times, values, 9.9) is None
    assert interpolate(times, values, 13.1) is None
    assert interpolate([], [], 1.0) is None


def test_a_task_counts_only_where_it_was_sampled_on_both_sides():
    times = [0.0, 1.0, 2.0]
    samples = [{"ps0": 1.0}, {"ps0": 2.0, "worker0": 0.5}, {"ps0": 4.0, "worker0": 1.5}]
    assert interpolate_cpu(times, samples, 0.5) == {"ps0": pytest.approx(1.5)}
    assert interpolate_cpu(times, samples, 1.5) == {"ps0": pytest.approx(3.0), "worker0": pytest.approx(1.0)}


def test_a_window_read_late_still_counts_from_the_markers_own_times():
    # The harness read both lines late (its own samples say 5 and 5 CPU s); the clock's series gives
    # the CPU at the times the task stamped: 2 s apart, 1 CPU s apart.
    clock = types.SimpleNamespace(
        cpu_at=lambda when: interpolate_cpu([0.0, 4.0], [{"w": 0.0}, {"w": 2.0}], when),
        bytes_at=lambda when: interpolate([0.0, 4.0], [0, 4000], when),
    )
    result = TaskResult(
        Task("w", []),
        cpu_samples=[({"event": "warm", "time": 1.0}, {"w": 5.0}), ({"event": "tick", "time": 3.0}, {"w": 5.0})],
        loopback_samples=[9999, 9999],
    )
    run = types.SimpleNamespace(results={"w": result}, clock=clock, count_loopback=True)
    _Run.stamp_markers(run)
    assert [cpu["w"] for _, cpu in result.cpu_samples] == [pytest.approx(0.5), pytest.approx(1.5)]
    assert result.loopback_samples == [pytest.approx(1000), pytest.approx(3000)]


def test_the_clock_samples_a_live_process_and_stops():
    clock = ResourceClock()
    try:
        clock.track("self", os.getpid())
        clock.sample()
    finally:
        clock.stop()
    assert not clock._thread.is_alive()
    assert all("self" in sample for sample in clock.cpu)
    assert clock.cpu[-1]["self"] >= clock.cpu[0]["self"]
    assert clock.cpu_at(clock.times[-1]) == {"self": pytest.approx(clock.cpu[-1]["self"])}
    assert clock.bytes_at(clock.times[-1]) is None
