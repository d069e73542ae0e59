"""The benchmark's dynamic tables as users meet them: the graph sizes, the TFRA systems, their records.

Fast: plans, argv, records and the report, in this process; one real graph build per system is slow.
"""

import dataclasses
import json
import pathlib
import subprocess
import sys

import pytest

from benchmarks import graph_size, plan, report, systems, tfra_systems
from benchmarks.graph_size import GraphConfig

GRAPH_SYSTEMS = (systems.TOOLKIT, systems.TOOLKIT_DYNAMIC, systems.RAW, systems.TOOLKIT_TFRA, systems.TFRA_TF2_15)


def test_graph_plan_sizes_every_graph_building_system_at_26_and_200_fields():
    configs = plan.graph_configs()
    per_field = {(g.system, g.fields) for g in configs if g.tables == "per_field"}
    assert per_field == {(s, f) for s in GRAPH_SYSTEMS for f in (26, 200)}
    assert {(g.system, g.fields) for g in configs if g.tables == "shared"} == {(systems.TOOLKIT_DYNAMIC, 26)}
    assert {g.vocab for g in configs if g.fields == 26} == {plan.CTR_VOCAB}
    assert {g.vocab for g in configs if g.fields == 200} == {graph_size.MANY_FIELDS_VOCAB}
    assert systems.TF2 not in {g.system for g in configs}  # its tf.function is no TF1 graph


def test_a_build_command_names_the_graph_and_its_line_parses():
    command = graph_size.build_command(GraphConfig(systems.TOOLKIT_DYNAMIC, 200, "per_field", 10_000, 8))
    assert command[1:3] == ["-m", "benchmarks.graph_size"]
    assert {"--system=ps_toolkit_dynamic", "--fields=200", "--vocab=10000", "--dim=8"} <= set(command)
    stdout = "noise\n" + graph_size.GRAPH_PREFIX + json.dumps({"graph_ops": 12, "graph_build_s": 0.5}) + "\n"
    assert graph_size.parse_build_line(stdout) == {"graph_ops": 12, "graph_build_s": 0.5}
    assert graph_size.parse_build_line("no figures") is None


def test_a_tfra_graph_build_is_the_same_script_on_either_stack():
    real = tfra_systems.graph_command(systems.TFRA_TF2_15, 200, 10_000, 8, "/envs/tfra/bin/python")
    ours = tfra_systems.graph_command(systems.TOOLKIT_TFRA, 200, 10_000, 8, None)
    assert real[0] == "/envs/tfra/bin/python" and real[1] == tfra_systems.SCRIPT
    assert ours[1:3] == [tfra_systems.RUN_LEGACY, tfra_systems.SCRIPT]
    assert real[2:] == ours[3:] and "--graph_only" in real and "--ctr_fields=200" in real
    with pytest.raises(ValueError, match="tfra_tf2_15"):
        tfra_systems.graph_command(systems.TFRA_TF2_15, 26, 10, 8, None)


def test_graph_records_take_the_median_build_and_attach_to_the_training_records():
    config = GraphConfig(systems.TOOLKIT_DYNAMIC, 26, "per_field", 1000, 8)
    builds = [{"graph_ops": 900, "graph_build_s": s} for s in (3.0, 1.0, 2.0)]
    graph = graph_size.graph_record(config, builds, ["exit 1: boom"])
    assert (graph["graph_ops"], graph["graph_build_s"], graph["graph_build_s_min"]) == (900, 2.0, 1.0)
    assert graph["repetitions"] == 3 and graph["failures"] == ["exit 1: boom"] and graph["model"] == "ctr"
    assert graph_size.graph_record(config, [], ["no graph after 9 s"])["graph_ops"] is None
    training = [
        {"system": systems.TOOLKIT_DYNAMIC, "model": "ctr", "tables": "per_field", "fields": 26, "ids": "uniform"},
        {"system": systems.TOOLKIT_DYNAMIC, "model": "ctr", "tables": "shared", "fields": 26, "ids": "uniform"},
        {"system": systems.TF2, "model": "ctr", "tables": "per_field", "fields": 26, "ids": "uniform"},
        {"system": systems.TOOLKIT, "model": "mlp"},
    ]
    records = graph_size.with_graph_figures(training, [graph])
    assert (records[0]["graph_ops"], records[0]["graph_build_s"]) == (900, 2.0)
    assert records[1]["graph_ops"] is None and records[2]["graph_build_s"] is None  # another graph; no TF1 graph
    assert "graph_ops" not in records[3] and records[-1] is graph


def _ctr_config(system):
    return next(c for c in plan.ctr_configs(vocab=1000) if c.system == system and c.ctr.ids == "zipf1.2")


def test_tfra_tasks_are_started_the_demos_way_with_the_same_flags_on_both_stacks():
    real = dataclasses.replace(_ctr_config(systems.TFRA_TF2_15), python="/envs/tfra/bin/python")
    ours = _ctr_config(systems.TOOLKIT_TFRA)
    tasks = {s: systems.tasks(c, [1, 2, 3, 4], "/tmp/ckpt", "/tmp/data") for s, c in (("real", real), ("ours", ours))}
    assert [t.name for t in tasks["real"]] == ["ps0", "ps1", "worker0", "worker1"]
    assert {t.executable for t in tasks["real"]} == {"/envs/tfra/bin/python"}
    assert {t.executable for t in tasks["ours"]} == {sys.executable}
    for real_task, our_task in zip(tasks["real"], tasks["ours"], strict=True):
        assert real_task.argv[0] == tfra_systems.SCRIPT
        assert our_task.argv[:2] == [tfra_systems.RUN_LEGACY, tfra_systems.SCRIPT]
        assert real_task.argv[1:] == our_task.argv[2:]  # the same script, the same flags
        assert not real_task.fork and real_task.must_finish == (not real_task.name.startswith("ps"))
    worker0 = tasks["real"][2].argv
    assert {"--ps_list=localhost:1,localhost:2", "--worker_list=localhost:3,localhost:4"} <= set(worker0)
    assert {"--task_mode=worker", "--task_id=0", "--is_chief=True", "--ctr_ids=zipf1.2", "--ctr_vocab=1000"} <= set(
        worker0
    )
    assert "--is_chief=False" in tasks["real"][3].argv
    # Timed by the harness as the raw script is: its ps joins forever.
    assert systems.run_options(real, 4.0)["end_after_warm"] == (2, 4.0)


def test_real_tfra_is_skipped_with_one_line_where_its_environment_cannot_be_made(monkeypatch):
    monkeypatch.setattr(tfra_systems, "real_tfra_python", lambda given: (None, "no python3.11 here"))
    configs = [_ctr_config(systems.TFRA_TF2_15), _ctr_config(systems.TOOLKIT_TFRA)]
    graphs = [GraphConfig(systems.TFRA_TF2_15, 26), GraphConfig(systems.TOOLKIT, 26)]
    kept, kept_graphs, skipped, python = tfra_systems.with_real_tfra(configs, graphs, None)
    assert [c.system for c in kept] == [systems.TOOLKIT_TFRA] and [g.system for g in kept_graphs] == ["ps_toolkit"]
    assert skipped == ["tfra_tf2_15 skipped: no python3.11 here"] and python is None
    monkeypatch.setattr(tfra_systems, "real_tfra_python", lambda given: ("/envs/tfra/bin/python", "made"))
    kept, _, skipped, python = tfra_systems.with_real_tfra(configs, graphs, None)
    assert kept[0].python == "/envs/tfra/bin/python" and kept[1].python is None and not skipped


def test_a_given_tfra_python_that_does_not_run_is_one_line(tmp_path):
    python, reason = tfra_systems.real_tfra_python(str(tmp_path / "nothing"))
    assert python is None and "--tfra_python=" in reason and "\n" not in reason


def _training_record(system, tables, ids, steps, cpu):
    return {
        "system": system,
        "model": "ctr",
        "ids": ids,
        "tables": tables,
        "fields": 26,
        "mode": "async",
        "num_ps": 2,
        "num_workers": 2,
        "steps_per_sec": steps,
        "min": steps,
        "max": steps,
        "startup_s": 1.0,
        "shutdown_s": 1.0,
        "cpu_ms_per_example": cpu,
        "bytes_per_step": None,
        "auc": 0.7,
        "train_steps": 100,
        "variant": "",
    }


def test_the_report_sets_the_dynamic_tables_against_the_fixed_and_our_tfra_against_real_tfra(tmp_path):
    training = [
        _training_record(systems.TOOLKIT, "per_field", "zipf1.05", 80.0, 0.1),
        _training_record(systems.TOOLKIT_DYNAMIC, "per_field", "zipf1.05", 40.0, 0.2),
        _training_record(systems.TOOLKIT_TFRA, "per_field", "zipf1.05", 30.0, 0.3),
        _training_record(systems.TFRA_TF2_15, "per_field", "zipf1.05", 20.0, 0.6),
    ]
    graphs = [
        graph_size.graph_record(GraphConfig(s, 200, "per_field", 10_000), [{"graph_ops": ops, "graph_build_s": b}], [])
        for s, ops, b in ((systems.TOOLKIT, 1000, 2.0), (systems.TOOLKIT_DYNAMIC, 3000, 5.0))
    ]
    records = graph_size.with_graph_figures(training, graphs)
    text = report.markdown_table(records)
    dynamic_row = next(line for line in text.splitlines() if "| ps_toolkit_dynamic | - | 40" in line)
    assert dynamic_row.endswith("| ps_toolkit 0.50x, 2.00x |")
    ours_row = next(line for line in text.splitlines() if "| ps_toolkit_tfra |" in line)
    assert ours_row.endswith("| tfra_tf2_15 1.50x, 0.50x |")
    graph_row = next(line for line in text.splitlines() if line.startswith("| 200 | per_field | ps_toolkit_dynamic"))
    assert "| 3,000 | 5 (5-5) | 3.00x | 2.50x |" in graph_row
    report.write_all(records, str(tmp_path), {})  # every record keeps the keys results.json requires
    written = json.loads((tmp_path / "results.json").read_text())["results"]
    assert sum(r.get("measure") == "graph" for r in written) == 2


@pytest.mark.slow
@pytest.mark.parametrize("system", graph_size.BUILT_HERE)
def test_a_graph_build_counts_more_ops_for_more_fields(system):
    counts = []
    for fields in (2, 4):
        builds, failures = graph_size.run_builds(
            graph_size.build_command(GraphConfig(system, fields, "per_field", 100, 4)), 1, 600
        )
        assert not failures and len(builds) == 1, failures
        assert builds[0]["graph_build_s"] > 0
        counts.append(builds[0]["graph_ops"])
    assert 0 < counts[0] < counts[1], counts


@pytest.mark.parametrize("flag", ["--run_timeout_s=0", "--graph_timeout_s=-1"])
def test_a_bound_that_is_not_positive_is_one_line(tmp_path, flag):
    script = pathlib.Path(__file__).parents[1] / "scripts" / "benchmark.py"
    done = subprocess.run(
        [sys.executable, str(script), f"--out={tmp_path}", flag], capture_output=True, text=True, timeout=300
    )
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if "must be positive" in line]
    assert len(lines) == 1 and flag.split("=")[0] in lines[0] and "Traceback" not in done.stderr
    assert not list(tmp_path.iterdir())
