"""Elastic Ray workers without Ray: the bounds, the phase report, and the ps waiting for the permanent workers only."""

from __future__ import annotations

import json

import pytest

from ps_toolkit.backends.ray import elastic as ray_elastic
from ps_toolkit.base.errors import ConfigError
from ps_toolkit.base.progress_lines import PROGRESS_PREFIX
from ps_toolkit.cluster.config import ELASTIC_WORKERS_FROM_ENV, ClusterConfig
from ps_toolkit.task.roles.ps import awaited_replicas


@pytest.mark.parametrize(
    "bounds, message",
    [((2, None), "go together"), ((None, 4), "go together"), ((0, 4), "1 <= min < max"), ((3, 3), "1 <= min < max")],
)
def test_bad_bounds_are_config_errors(bounds, message):
    with pytest.raises(ConfigError, match=message):
        ray_elastic.check_bounds(*bounds)


def test_no_bounds_is_no_elastic_launch_and_good_ones_pass():
    assert ray_elastic.check_bounds(None, None) is None
    assert ray_elastic.check_bounds(2, 4) == (2, 4)


def _cluster(task_type: str, chief: bool) -> ClusterConfig:
    jobs = {"ps": ["h:1"], "worker": ["h:2", "h:3", "h:4", "h:5"], **({"chief": ["h:6"]} if chief else {})}
    return ClusterConfig(jobs=jobs, task_type=task_type, task_index=0, source="test")


@pytest.mark.parametrize("chief", [False, True])
def test_a_ps_waits_for_the_permanent_workers_only(chief):
    cluster = _cluster("ps", chief)
    assert awaited_replicas(cluster, {}) == cluster.replica_tasks()
    expected = ([("chief", 0)] if chief else []) + [("worker", 0), ("worker", 1)]
    assert awaited_replicas(cluster, {ELASTIC_WORKERS_FROM_ENV: "2"}) == expected


def test_a_bad_elastic_bound_is_named():
    with pytest.raises(ConfigError, match=f"{ELASTIC_WORKERS_FROM_ENV}='two'"):
        awaited_replicas(_cluster("ps", False), {ELASTIC_WORKERS_FROM_ENV: "two"})


def test_a_phase_reports_the_chiefs_steps_per_second_within_it(tmp_path):
    log = tmp_path / "worker-0.log"
    records = [(100.0, 10), (102.0, 30), (104.0, 70), (110.0, 200)]
    lines = [PROGRESS_PREFIX + json.dumps({"time": t, "global_step": s}) for t, s in records]
    log.write_text("\n".join(["noise", *lines, PROGRESS_PREFIX + "{not json"]) + "\n")
    assert ray_elastic._chief_records(str(log), 101.0, 105.0) == [(102.0, 30), (104.0, 70)]
    phase = ray_elastic.Phase(4, 101.0, 105.0, ((102.0, 30), (104.0, 70)))
    assert phase.line(100.0) == "4 workers from 1.0s to 5.0s: global step 30 -> 70, 20.0 global steps/s"
    assert "fewer than two progress records" in ray_elastic.Phase(2, 101.0, 105.0, ((102.0, 30),)).line(100.0)


def test_the_wanted_count_is_clipped_to_the_bounds(tmp_path):
    pool = ray_elastic.ElasticWorkers([], min_workers=2, log_dir=str(tmp_path), chief_log="", stop_grace_secs=1)
    for written, read in (("9", 2), ("1", 2), ("x", None)):
        (tmp_path / ray_elastic.WANTED_FILE).write_text(written)
        assert pool._wanted() == read
    ray_elastic.request_workers(str(tmp_path), 2)
    assert (tmp_path / ray_elastic.WANTED_FILE).read_text() == "2\n"
