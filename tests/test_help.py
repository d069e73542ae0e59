"""``--help`` of every script: its own flags with defaults and choices, exit 0; one definition of the training flags."""

import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = ["run_task.py", "launch_local.py", "make_tfjob.py", "make_slurm_job.py", "benchmark.py", "run_legacy.py"]
SCRIPTS += ["launch_ray.py", "launch_spark.py", "convert_embeddings.py"]


def run_script(name: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": REPO}
    return subprocess.run(
        [sys.executable, os.path.join(REPO, "scripts", name), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO,
    )


def flag_blocks(help_text: str) -> dict[str, str]:
    """{flag name: its help block} from absl's help output."""
    blocks, name = {}, None
    for line in help_text.splitlines():
        match = re.match(r"^  --(?:\[no\])?(\w+):", line)
        if match:
            name = match.group(1)
            blocks[name] = line.strip()
        elif name and line.startswith("    "):
            blocks[name] += " " + line.strip()
        else:
            name = None
    return blocks


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_exits_0(script):
    result = run_script(script, "--help")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr


def test_run_task_help_lists_all_its_own_flags_with_defaults_and_choices():
    result = run_script("run_task.py", "--help")
    blocks = flag_blocks(result.stdout)
    for name in ("job_name", "task_index", "ps_hosts", "train_steps", "checkpoint_dir", "ps_orphan_timeout_secs"):
        assert name in blocks, result.stdout
    assert "<softmax|mlp|wide|cnn>" in blocks["model"] and "(default: 'softmax')" in blocks["model"]
    assert "(default: '1000')" in blocks["train_steps"]
    # absl's own flags stay in --helpfull.
    assert "verbosity" not in blocks and "logtostderr" not in blocks
    full = run_script("run_task.py", "--helpfull")
    assert full.returncode == 0
    assert "--verbosity" in full.stdout and "--train_steps" in full.stdout


def test_launch_local_passes_through_every_training_flag_with_the_same_help():
    own = flag_blocks(run_script("run_task.py", "--help").stdout)
    launcher = flag_blocks(run_script("launch_local.py", "--help").stdout)
    cluster_flags = {"job_name", "task_index", "cluster_file", "cluster_from", "slurm_num_ps", "slurm_roles"}
    cluster_flags |= {"slurm_port_base", "ps_hosts", "worker_hosts", "chief_hosts", "evaluator_hosts"}
    for name, block in own.items():
        if name in cluster_flags:
            continue
        assert launcher.get(name) == block, name
    assert "num_ps" in launcher and "log_dir" in launcher and "restart" in launcher


def test_launch_local_help_after_the_command_separator_belongs_to_the_command():
    # `-- python x.py --help` is the command's flag, not the launcher's: the launcher starts a run
    # and fails on the missing script instead of printing its help.
    result = run_script("launch_local.py", "--num_ps=1", "--num_workers=0", "--", "python", "x.py", "--help")
    assert result.returncode == 2
    assert "flags:" not in result.stdout


def test_flags_defined_later_are_found_for_pass_through():
    from absl import flags

    from ps_toolkit import cli

    def define():
        flags.DEFINE_integer("zz_issue17_new_training_flag", 1, "A flag a later change adds.")

    assert cli.names_defined_by(define) == ["zz_issue17_new_training_flag"]


@pytest.mark.slow
def test_launch_local_passes_training_flags_through_to_run_task(tmp_path):
    import json

    flags_given = ["--train_steps=7", "--seed=3", "--nopack_transfers", "--placement=greedy", "--watchdog_secs=90"]
    result = run_script(
        "launch_local.py",
        "--quiet",
        "--nochart",
        "--isolation=none",
        "--num_ps=0",
        "--num_workers=1",
        f"--log_dir={tmp_path}",
        *flags_given,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    config = json.loads((tmp_path / "checkpoints" / "flags.json").read_text())["train_config"]
    assert config["train_steps"] == 7 and config["seed"] == 3 and config["pack_transfers"] is False
    assert config["placement"] == "greedy" and config["watchdog_secs"] == 90.0
