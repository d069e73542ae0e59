"""TFRA model_dirs written by real TFRA 0.7.2 (TF 2.15.1) and 0.8.1 (TF 2.16.2) restore into the compat layer's tables.

The checkpoints are tests/fixtures/tfra_checkpoints/ (make_checkpoints.py made them, in the
environments of benchmarks/tfra_env.py); fixtures_legacy/tfra_restore.py restores one under
run_legacy.py with a MonitoredTrainingSession, compares every table's rows and Adam slots with the
checkpoint's TFRA shards and trains on; fixtures_legacy/tfra_resume_ps.py continues the demo's PS
shape on a real cluster of 3 ps (slow).
"""

import json
import os
import shutil

import pytest
from fixtures_legacy.launch import launch, legacy
from test_tfra_compat import FIXTURES, explain, json_lines, run_legacy

CHECKPOINTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "tfra_checkpoints")
RESTORE = os.path.join(FIXTURES, "tfra_restore.py")
RESUME_PS = os.path.join(FIXTURES, "tfra_resume_ps.py")
# tfra_model.TABLES, in the order its "sizes" are (not imported: it imports TensorFlow).
TABLE_ORDER = ["user_dynamic_embeddings", "movie_dynamic_embeddings", "genre_dynamic_embeddings"]
MADE_BY = ("tf2.15-tfra0.7", "tf2.16-tfra0.8")


def model_dir_copy(tmp_path, made_by):
    """A copy of a committed TFRA model_dir (the session may write into its model_dir)."""
    copy = tmp_path / made_by
    shutil.copytree(os.path.join(CHECKPOINTS, made_by), copy)
    return copy


def manifest(made_by):
    with open(os.path.join(CHECKPOINTS, made_by, "MANIFEST.json")) as f:
        return json.load(f)


def restore(model_dir, *flags, timeout=300):
    proc = run_legacy([RESTORE, f"--model_dir={model_dir}", *flags], timeout=timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("tfra_restore ")]
    return proc, (json.loads(lines[-1][len("tfra_restore ") :]) if lines else None)


def files_of(folder):
    return {name: (folder / name).read_bytes() for name in sorted(os.listdir(folder))}


@pytest.mark.parametrize(("made_by", "shards"), [("tf2.15-tfra0.7", 3), ("tf2.16-tfra0.8", 1)])
def test_rows_and_adam_slots_come_back_onto_another_number_of_shards_and_training_goes_on(tmp_path, made_by, shards):
    made = manifest(made_by)
    proc, result = restore(model_dir_copy(tmp_path, made_by), f"--shards={shards}", "--steps=20")
    assert proc.returncode == 0 and result, explain(proc)
    assert result["restored_step"] == made["steps"] and result["final_step"] == made["steps"] + 20, result
    # Every table (rows, then Adam's m and v) holds exactly the ids and values TFRA saved over its 2 shards.
    expected = {f"{table}{slot}" for table in made["rows"] for slot in ("", ":m", ":v")}
    assert set(result["compared"]) == expected, result["compared"]
    for name, compared in result["compared"].items():
        table = name.partition(":")[0]
        assert compared["same_ids"] and compared["ids"] == made["rows"][table], (name, compared)
        assert compared["max_abs_diff"] == 0.0, (name, compared)
    # The dense tower came back too: the first loss is TFRA's last, not a fresh model's; training lowers it.
    losses = result["losses"]
    assert losses[0] < 2 * made["last_loss"] < made["first_loss"] / 5, (losses[:3], made)
    assert sum(losses[-5:]) / 5 < losses[0], losses


def _assert_refused_in_one_line(proc, model_dir, before, words):
    assert proc.returncode == 2, explain(proc)
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("tfra_restore.py: error: ") and all(w in last for w in words), explain(proc)
    assert "Traceback" not in proc.stderr, explain(proc)
    assert files_of(model_dir) == before  # nothing written


@pytest.mark.parametrize(
    ("flag", "words"),
    [
        ("--user_dim=8", ["table user_dynamic_embeddings has rows of dim 8", "[(4,)]", "nothing restored"]),
        ("--user_key_dtype=string", ["table user_dynamic_embeddings has string keys; the checkpoint's int64"]),
    ],
)
def test_a_checkpoint_of_another_dim_or_key_dtype_is_one_line_and_nothing_is_restored(tmp_path, flag, words):
    model_dir = model_dir_copy(tmp_path, "tf2.15-tfra0.7")
    before = files_of(model_dir)
    proc, result = restore(model_dir, flag, timeout=180)
    assert result is None, result
    _assert_refused_in_one_line(proc, model_dir, before, words)


def test_a_checkpoint_with_no_table_is_one_line(tmp_path):
    tableless = tmp_path / "tableless"
    tableless.mkdir()
    proc, _ = restore(model_dir_copy(tmp_path, "tf2.15-tfra0.7"), f"--write_tableless={tableless}", timeout=180)
    assert proc.returncode == 0 and os.path.exists(tableless / "model.ckpt-40.index"), explain(proc)
    before = files_of(tableless)
    proc, result = restore(tableless, timeout=180)
    assert result is None, result
    _assert_refused_in_one_line(
        proc, tableless, before, ["holds no dynamic embedding table", "user_dynamic_embeddings"]
    )


@pytest.mark.slow
@pytest.mark.parametrize("made_by", MADE_BY)
def test_the_ps_demo_shape_continues_training_from_a_tfra_model_dir_on_three_ps(tmp_path, made_by):
    made = manifest(made_by)
    model_dir = model_dir_copy(tmp_path, made_by)
    script = legacy(RESUME_PS, f"--model_dir={model_dir}", "--train_steps=40")
    run = launch(tmp_path / "run", ["--num_ps=3", "--num_workers=1"], script, timeout_secs=240)
    assert run.returncode == 0, run.describe()
    worker = [line for line in json_lines(run.logs["worker-0"], "tfra_result") if line["tfra_result"] == "worker"]
    assert worker, run.describe()
    result = worker[-1]
    assert result["restored_step"] == made["steps"] and result["shards"] == 3, result
    assert result["sizes"] == [made["rows"][table] for table in sorted(made["rows"], key=TABLE_ORDER.index)], result
    losses = result["losses"]
    # From TFRA's last loss on (a fresh model starts near first_loss), lower after 40 more steps.
    assert losses[0] < 2 * made["last_loss"] < made["first_loss"] / 5, (losses[:3], made)
    assert sum(losses[-10:]) / 10 < made["last_loss"], (losses[-10:], made)
    # The chief saved its own checkpoint after TFRA's: the model_dir now holds ps_toolkit's table keys.
    assert os.path.exists(model_dir / f"model.ckpt-{made['steps'] + 40}.index"), sorted(os.listdir(model_dir))
