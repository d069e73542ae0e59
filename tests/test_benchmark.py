"""Fast tests of the benchmark's pieces: timing from markers, records, the report, the runner, the fast path."""

import dataclasses
import json
import pathlib
import types

import pytest

from benchmarks import driver, measure, plan, protocol, report, systems, toolkit_task
from benchmarks.cluster_run import ClusterOutcome, ClusterRunError, Task, TaskResult, run_cluster


def _result(name, markers, exited_at, killed=False, cpu=1.0):
    task = Task(name, [])
    lines = [protocol.MARKER + json.dumps(m) for m in markers]
    # CPU seconds grow with the marker time, the same for every task.
    samples = [(m, {"a": cpu * (m["time"] or 0), "b": cpu * (m["time"] or 0)}) for m in markers]
    return TaskResult(task, lines=lines, cpu_samples=samples, returncode=0, exited_at=exited_at, killed=killed)


def _outcome(killed=False):
    worker0 = [
        {"event": "first_step", "time": 102.0, "global_step": 1},
        {"event": "warm", "time": 103.0, "global_step": 200},
        {"event": "done", "time": 113.0, "global_step": 1200, "accuracy": 0.9},
    ]
    worker1 = [
        {"event": "first_step", "time": 102.5, "global_step": 3},
        {"event": "warm", "time": 104.0, "global_step": 300},
        {"event": "tick", "time": 108.0, "global_step": 700},
        {"event": "done", "time": 113.2, "global_step": 1201, "accuracy": 0.91},
    ]
    results = {
        "worker0": _result("worker0", worker0, 113.5),
        "worker1": _result("worker1", worker1, 113.6, killed=killed),
    }
    return ClusterOutcome(launched_at=100.0, results=results, training_over_at=113.0)


def test_figures_time_the_window_where_every_replica_is_past_warm_up():
    figures = measure.figures(_outcome())
    assert figures.steps_per_sec == pytest.approx((1200 - 300) / (113.0 - 104.0))
    assert figures.startup_s == pytest.approx(2.5)  # the last replica's first step
    assert figures.startup_first_s == pytest.approx(2.0)
    assert figures.shutdown_s == pytest.approx(113.6 - 113.2)
    assert figures.done_spread_s == pytest.approx(113.2 - 113.0)  # the first replica's done to the last's
    assert figures.accuracy == pytest.approx(0.91)
    assert figures.cpu_ms_per_step == pytest.approx(1000 * 2 * (113.0 - 104.0) / 900)
    assert figures.cpu_ms_per_step_by_task == pytest.approx({"a": 10.0, "b": 10.0})


def _late_joiner_outcome(worker1):
    outcome = _outcome()
    outcome.results["worker1"] = _result("worker1", worker1, 114.0)
    return outcome


def test_a_replica_that_starts_after_another_finished_is_a_clear_failure():
    # worker0 was done at 113.0; worker1 only got going after it.
    worker1 = [
        {"event": "first_step", "time": 113.5, "global_step": 1200},
        {"event": "warm", "time": 113.5, "global_step": 1200},
        {"event": "done", "time": 113.9, "global_step": 1220},
    ]
    with pytest.raises(ValueError, match="never trained together"):
        measure.figures(_late_joiner_outcome(worker1))


def test_a_replica_that_ran_no_step_is_a_clear_failure():
    worker1 = [{"event": "done", "time": None, "global_step": None, "local_runs": 0}]
    with pytest.raises(ValueError, match="no step: worker1"):
        measure.figures(_late_joiner_outcome(worker1))


def test_a_killed_task_means_no_shutdown_figure():
    figures = measure.figures(_outcome(killed=True))
    assert figures.shutdown_s is None
    assert figures.killed == ("worker1",)


def test_summarize_gives_median_min_max():
    runs = [measure.figures(_outcome()) for _ in range(2)]
    runs.append(measure.RunFigures(10.0, 3.0, 0.5, (), 0.9, 100))
    summary = measure.summarize(runs)
    assert (summary["min"], summary["max"]) == (10.0, 100.0)
    assert summary["steps_per_sec"] == 100.0
    assert summary["repetitions"] == 3


def _record(system, model="mlp", mode="async", num_ps=1, num_workers=2, rate=100.0):
    return {
        "system": system,
        "model": model,
        "mode": mode,
        "num_ps": num_ps,
        "num_workers": num_workers,
        "steps_per_sec": rate,
        "min": rate * 0.9,
        "max": rate * 1.1,
        "startup_s": 3.0,
        "shutdown_s": None if system == systems.RAW else 0.3,
    }


def test_report_writes_json_table_and_chart(tmp_path):
    records = [
        _record(systems.TOOLKIT, rate=260.0),
        _record(systems.RAW, rate=200.0),
        _record(systems.TF2, rate=100.0),
        _record(systems.SINGLE, num_ps=0, num_workers=1, rate=400.0),
    ]
    cpu = {"median": 4.0, "min": 4.0, "max": 4.0, "runs": [4.0]}
    main_job = {
        "fork": {"median": 6.0, "min": 5.5, "max": 7.0, "runs": [5.5, 6.0, 7.0], "cpu": cpu},
        "exec": {"median": 12.0, "min": 11.0, "max": 13.0, "runs": [11.0, 12.0, 13.0], "cpu": dict(cpu, median=8.0)},
        "fork_over_exec": 0.5,
        "cpu_fork_over_exec": 0.5,
    }
    paths = report.write_all(records, str(tmp_path), {"quick": True, "main_job": main_job})
    saved = json.loads(pathlib.Path(paths["json"]).read_text())
    assert [set(report.RECORD_KEYS) <= set(r) for r in saved["results"]] == [True] * 4
    table = pathlib.Path(paths["md"]).read_text()
    assert "| mlp | async | 1+2 | 260 (234-286) | 200 (180-220) | 100 (90-110) | 1.30x | 2.60x | 0.65x |" in table
    assert "killed" in table  # the raw run's ps never exits by itself
    assert "wall time fork 6.0 s (5.5-7.0), exec 12.0 s (11.0-13.0), fork/exec 0.50x" in table
    assert "CPU time fork 4.0 s (4.0-4.0), exec 8.0 s (4.0-4.0), fork/exec 0.50x" in table
    assert "vs single process: mlp 3.00 s vs 3.00 s (+0.00 s)" in table
    assert pathlib.Path(paths["png"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_rejects_a_record_without_the_required_keys(tmp_path):
    with pytest.raises(ValueError, match="startup_s"):
        report.write_json([{"system": "x", "model": "mlp"}], str(tmp_path / "r.json"), {})


def test_raw_script_runs_are_ended_by_time_and_its_ps_may_be_killed():
    config = systems.Config(systems.RAW, "mlp", systems.ASYNC, 1, 2, 1000)
    tasks = systems.tasks(config, [1, 2, 3], "/tmp/ckpt", "/tmp/data")
    assert [t.must_finish for t in tasks] == [False, True, True]
    assert not any(t.fork for t in tasks)  # started as its users run it, one process each
    assert "--warmup_steps=200" in tasks[1].argv
    assert systems.run_options(config, 4.0) == {"end_after_warm": (2, 4.0), "exit_grace_s": 0.0}


def test_tf2_tasks_add_a_coordinator_with_its_own_port():
    config = systems.Config(systems.TF2, "softmax", systems.ASYNC, 1, 2, 100)
    assert config.num_ports == 4
    tasks = systems.tasks(config, [11, 12, 13, 14], "/unused", "/unused")
    assert [t.name for t in tasks] == ["ps0", "worker0", "worker1", "chief"]
    assert "--chief_host=localhost:14" in tasks[-1].argv
    assert not any(t.fork for t in tasks)


def test_toolkit_tasks_are_run_task_with_its_defaults():
    config = systems.Config(systems.TOOLKIT, "mlp", systems.ASYNC, 1, 2, 1500)
    tasks = systems.tasks(config, [1, 2, 3], "/tmp/ckpt", "/tmp/data")
    assert [t.name for t in tasks] == ["ps0", "worker0", "worker1"]
    assert all(t.must_finish for t in tasks)  # shipped tasks end by themselves
    assert all(t.fork for t in tasks)  # forked from one fork server, as the launcher starts them
    argv = tasks[1].argv
    assert argv[:2] == ["-m", "benchmarks.toolkit_task"]
    for flag in ("--data_dir=/tmp/data", "--batch_size=128", "--learning_rate=0.1", "--job_name=worker"):
        assert flag in argv
    assert not [a for a in argv if a.startswith("--steps_per_run")]  # run_task.py's default: 20 async
    one_step = systems.tasks(dataclasses.replace(config, system=systems.TOOLKIT_1STEP), [1, 2, 3], "/c", "/d")
    assert "--steps_per_run=1" in one_step[1].argv
    near = systems.tasks(dataclasses.replace(config, system=systems.TOOLKIT_NEAR), [1, 2, 3], "/c", "/d")
    assert "--compute_near_weights=all" in near[1].argv
    sync = systems.tasks(dataclasses.replace(config, mode=systems.SYNC), [1, 2, 3], "/c", "/d")
    assert "--sync_replicas" in sync[2].argv


def test_embedding_model_tasks_use_each_systems_own_script():
    config = systems.Config(systems.TOOLKIT, "embedding", systems.ASYNC, 2, 2, 100)
    toolkit = systems.tasks(config, [1, 2, 3, 4], "/c", "/d")[2].argv
    assert "--model_fn=benchmarks.embedding_model:model_fn" in toolkit and "--optimizer=sgd" in toolkit
    assert not [a for a in toolkit if a.startswith(("--model=", "--data_dir="))], toolkit
    raw = systems.tasks(dataclasses.replace(config, system=systems.RAW), [1, 2, 3, 4], "/c", "/d")[2].argv
    assert raw[:2] == ["-m", "benchmarks.raw_tf1_embedding"], raw
    tf2 = systems.tasks(dataclasses.replace(config, system=systems.TF2), [1, 2, 3, 4, 5], "/c", "/d")[-1].argv
    assert tf2[:2] == ["-m", "benchmarks.tf2_pss_embedding"], tf2


def test_timed_train_prints_the_harness_markers(capsys):
    seen = []

    def train(cluster, target, config, data, session_config=None, on_progress=None, final_hooks=()):
        for step in (20, 40, 100):
            on_progress(step)
        return {"test_accuracy": 0.9, "final_loss": 0.1, "final_hooks": final_hooks}

    config = types.SimpleNamespace(train_steps=100)
    timed = toolkit_task.timed(train)
    result = timed("cluster", "grpc://x", config, "data", on_progress=seen.append, final_hooks=["done"])
    assert result["test_accuracy"] == 0.9
    assert result["final_hooks"] == ["done"]  # what run_task passes on reaches the real train
    assert seen == [20, 40, 100]  # the caller's own listener still hears every run
    markers = protocol.parse_markers(capsys.readouterr().out.splitlines())
    assert [m["event"] for m in markers] == ["first_step", "warm", "done"]
    assert markers[-1]["global_step"] == 100 and markers[-1]["accuracy"] == 0.9


def test_with_step_clock_times_replicas_not_ps(monkeypatch):
    from ps_toolkit.task.roles import trainer

    shipped = trainer.train
    calls = []
    wrapped = toolkit_task.with_step_clock(lambda cluster, config: calls.append(trainer.train))
    wrapped(types.SimpleNamespace(task_type="ps"), None)
    assert calls[-1] is shipped
    monkeypatch.setattr(trainer, "train", shipped)  # restored after the test
    wrapped(types.SimpleNamespace(task_type="worker"), None)
    assert calls[-1] is not shipped


def test_synthetic_idx_files_read_back_as_the_same_arrays(tmp_path):
    import numpy as np

    from benchmarks.synthetic import make_data, write_idx_dir
    from ps_toolkit.models.mnist_files import load_dataset

    made, read = make_data(), load_dataset(write_idx_dir(str(tmp_path)))
    for name in ("train_images", "train_labels", "test_images", "test_labels"):
        assert np.array_equal(getattr(made, name), getattr(read, name)), name
        assert getattr(made, name).dtype == getattr(read, name).dtype


def test_run_once_holds_its_ports_until_the_cluster_has_ended(monkeypatch, tmp_path):
    from ps_toolkit.launch import ports

    def fake_run_cluster(tasks, **options):
        for port in held:
            assert ports.port_is_reserved(port), f"port {port} was released while the cluster ran"
        return "outcome"

    held = []
    real_tasks = systems.tasks

    def tasks(config, port_list, checkpoint_dir, data_dir):
        held.extend(port_list)
        return real_tasks(config, port_list, checkpoint_dir, data_dir)

    monkeypatch.setattr(driver, "run_cluster", fake_run_cluster)
    monkeypatch.setattr(driver.systems, "tasks", tasks)
    monkeypatch.setattr(driver.measure, "figures", lambda outcome: outcome)
    config = systems.Config(systems.TOOLKIT, "softmax", systems.ASYNC, 1, 2, 100)
    assert driver.run_once(config, driver.Limits(), str(tmp_path)) == "outcome"
    assert len(held) == 3


def test_quick_plan_covers_every_target():
    configs = plan.quick()
    for model in plan.MODEL_NAMES:
        if model == "ctr":
            continue  # its variants: tests/test_ctr_benchmark.py
        num_ps, num_workers = plan.EMBEDDING_TOPOLOGY if model == "embedding" else (1, 2)
        for system in (systems.TOOLKIT, systems.RAW, systems.TF2):
            assert systems.Config(system, model, "async", num_ps, num_workers, plan.TRAIN_STEPS[model]) in configs
    for system in (systems.TOOLKIT, systems.RAW, systems.TOOLKIT_1STEP):
        assert systems.Config(system, "mlp", "sync", 1, 2, plan.TRAIN_STEPS["mlp"] // 2) in configs
    assert systems.Config(systems.TOOLKIT_1STEP, "mlp", "async", 1, 2, plan.TRAIN_STEPS["mlp"]) in configs
    for model in ("mlp", "wide"):
        assert systems.Config(systems.TOOLKIT_NEAR, model, "async", 1, 2, plan.TRAIN_STEPS[model]) in configs


# A benchmark run whose server writes its pid to the file in argv[1], then waits forever.
_HARNESS = """
import sys
from benchmarks.cluster_run import Task, run_cluster
ready = "import os, sys, threading; open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid())); "
ready += "os.rename(sys.argv[1] + '.tmp', sys.argv[1]); threading.Event().wait()"
run_cluster([Task("ps0", ["-c", ready, sys.argv[1]])], timeout_s=120, exit_grace_s=0.5)
"""


def test_a_killed_benchmark_leaves_no_server_behind(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    import psutil

    pid_file = tmp_path / "server.pid"
    repo = str(pathlib.Path(__file__).parent.parent)
    harness = subprocess.Popen([sys.executable, "-c", _HARNESS, str(pid_file)], cwd=repo)
    try:
        for _ in range(300):  # bounded: up to 30 s for the server to be up and running
            if pid_file.exists() or harness.poll() is not None:
                break
            psutil.wait_procs([psutil.Process(harness.pid)], timeout=0.1)
        assert pid_file.exists(), "the harness never started its server"
        server = psutil.Process(int(pid_file.read_text()))
        os.kill(harness.pid, signal.SIGKILL)
        harness.wait(timeout=10)
        _, alive = psutil.wait_procs([server], timeout=10)
        if alive:
            server.kill()
        assert not alive, f"server {server.pid} outlived the killed benchmark"
    finally:
        if harness.poll() is None:
            harness.kill()
            harness.wait(timeout=10)


def test_cluster_run_kills_a_server_that_never_exits():
    done = protocol.MARKER + json.dumps({"event": "done", "time": 0, "global_step": 1})
    worker = Task("worker0", ["-c", f"print({done!r})"])
    server = Task("ps0", ["-c", "import threading; threading.Event().wait()"], must_finish=False)
    outcome = run_cluster([server, worker], timeout_s=60, exit_grace_s=0.5)
    assert outcome.results["ps0"].killed
    assert outcome.results["worker0"].returncode == 0
    assert not outcome.results["worker0"].killed


def test_cluster_run_starts_a_task_after_its_marker_and_keeps_every_line():
    ready = protocol.MARKER + json.dumps({"event": "first_step", "time": 1.0, "global_step": 1})
    done = protocol.MARKER + json.dumps({"event": "done", "time": 2.0, "global_step": 2})
    # The server prints its marker, then a last line without a newline, and waits.
    server_code = f"import sys, threading; print({ready!r}); sys.stdout.write('no newline'); sys.stdout.flush()"
    server = Task("ps0", ["-c", server_code + "; threading.Event().wait()"])
    worker_code = f"import sys; print('a' * 100000); print({done!r}); print('bye', file=sys.stderr)"
    worker = Task("worker0", ["-c", worker_code], start_after=("ps0", "first_step"))
    outcome = run_cluster([server, worker], timeout_s=60, exit_grace_s=0.5)
    ps0, worker0 = outcome.results["ps0"], outcome.results["worker0"]
    assert ps0.lines == [ready, "no newline"] and ps0.killed and ps0.returncode == -9
    assert worker0.lines == ["a" * 100000, done] and worker0.returncode == 0 and not worker0.killed
    assert worker0.stderr_tail == "bye\n" and worker0.exited_at is not None
    assert [marker["event"] for marker, _ in ps0.cpu_samples + worker0.cpu_samples] == ["first_step", "done"]


def test_cluster_run_keeps_each_tasks_log_where_told(tmp_path):
    done = protocol.MARKER + json.dumps({"event": "done", "time": 0, "global_step": 1})
    worker = Task("worker0", ["-c", f"import sys; print('last words', file=sys.stderr); print({done!r})"])
    run_cluster([worker], timeout_s=60, exit_grace_s=0.5, keep_logs_in=str(tmp_path))
    assert (tmp_path / "worker0.log").read_text() == "last words\n"


def test_cluster_run_names_a_failed_task():
    worker = Task("worker0", ["-c", "import sys; print('trouble', file=sys.stderr); sys.exit(3)"])
    with pytest.raises(ClusterRunError, match="worker0 failed") as raised:
        run_cluster([worker], timeout_s=60, exit_grace_s=0.5)
    assert "trouble" in str(raised.value)


def test_main_job_alternates_the_start_methods_and_summarizes(monkeypatch):
    from benchmarks import main_job

    calls = []
    seconds = {"fork": iter([5.0, 7.0, 6.0]), "exec": iter([12.0, 10.0, 11.0])}

    def run_once(method, timeout_s, host):
        calls.append(method)
        wall = next(seconds[method])
        return wall, wall / 2

    monkeypatch.setattr(main_job, "run_once", run_once)
    summary = main_job.measure(3, methods=("fork", "exec"))
    assert calls == ["fork", "exec"] * 3
    assert summary["fork"]["runs"] == [5.0, 7.0, 6.0] and summary["fork"]["median"] == 6.0
    assert summary["fork"]["cpu"] == {"median": 3.0, "min": 2.5, "max": 3.5, "runs": [2.5, 3.5, 3.0]}
    assert summary["exec"]["median"] == 11.0 and summary["fork_over_exec"] == 0.55
    assert summary["cpu_fork_over_exec"] == 0.55
    assert len(summary["load_average"]) == 2 and all(load >= 0 for load in summary["load_average"])
    assert summary["fork_pair_ratio_median"] == 0.55  # 5/12, 7/10, 6/11
    assert "; load average " in main_job.main_job_line(summary)
    assert "(median of each repetition's own: fork/exec 0.55x)" in main_job.main_job_line(summary)


def test_main_job_starts_the_hosts_server_once_and_ends_it(monkeypatch):
    from benchmarks import main_job

    events = []
    host = main_job.HostServer(process="host process", path="/x/server.sock")
    monkeypatch.setattr(main_job, "_start_host_server", lambda path: events.append("start") or host)
    monkeypatch.setattr(main_job.fork_client, "stop_host_server", lambda process: events.append(("stop", process)))

    def run_once(method, timeout_s, given):
        events.append(method)
        assert given is host
        return {"fork": 6.0, "exec": 12.0, "host": 3.0}[method], 1.0

    monkeypatch.setattr(main_job, "run_once", run_once)
    summary = main_job.measure(2)
    assert events == ["start", "fork", "exec", "host", "fork", "exec", "host", ("stop", "host process")]
    assert summary["host_over_exec"] == 0.25 and summary["fork_over_exec"] == 0.5
    line = main_job.main_job_line(summary)
    assert "host 3.0 s (3.0-3.0), fork/exec 0.50x, host/exec 0.25x" in line, line


def test_main_job_refuses_a_bad_repetition_count_in_one_line(capsys):
    from benchmarks import main_job

    assert main_job.main(["main_job", "three"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'three'" in err
