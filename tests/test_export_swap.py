"""Exports (training.export, export_swap): a dead export's staging folder goes at the next export, the swap
into --export_dir never leaves the path without a model, and a full disk names the export path."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess

import pytest

from ps_toolkit.base.errors import EnvironmentProblem
from ps_toolkit.training import export


def _fake_write(size: int = 16):
    """Stands in for the SavedModel builder: a folder with a saved_model.pb of ``size`` bytes naming its export."""
    count = {"n": 0}

    def write(definition, input_context, checkpoint, path, partitioner) -> None:
        count["n"] += 1
        os.makedirs(path)
        with open(os.path.join(path, "saved_model.pb"), "wb") as out:
            out.write(f"export {count['n']}".encode().ljust(size, b"."))

    return write


@pytest.fixture
def fake_export(monkeypatch):
    monkeypatch.setattr(export.tf.train, "latest_checkpoint", lambda folder: os.path.join(folder, "model.ckpt-1"))
    monkeypatch.setattr(export, "_write", _fake_write())

    def run(export_dir) -> str:
        return export.export_saved_model(None, None, "/checkpoints", str(export_dir))

    return run


def _model(path) -> str:
    with open(os.path.join(path, "saved_model.pb"), "rb") as handle:
        return handle.read().decode().rstrip(".")


def test_a_dead_exports_staging_folder_is_removed_at_the_next_export_and_a_live_ones_is_not(fake_export, tmp_path):
    dead = tmp_path / ".export-killed"
    (dead / "model" / "variables").mkdir(parents=True)
    (dead / "model" / "variables" / "variables.data-00000-of-00001").write_bytes(b"x" * 4096)
    (dead / ".lock").write_text("")
    live = tmp_path / ".export-running"
    live.mkdir()
    held = os.open(live / ".lock", os.O_WRONLY | os.O_CREAT, 0o600)
    fcntl.flock(held, fcntl.LOCK_EX)  # another export, still writing
    try:
        fake_export(tmp_path / "model")
    finally:
        os.close(held)
    assert _model(tmp_path / "model") == "export 1"
    assert sorted(os.listdir(tmp_path)) == [".export-running", "model"]


def test_the_swap_leaves_a_whole_model_at_the_export_path_at_every_rename(fake_export, tmp_path, monkeypatch):
    """A kill between two renames would leave no model: every rename is followed by a look at the path."""
    export_dir = tmp_path / "model"
    fake_export(export_dir)
    seen = []
    real_rename = os.rename

    def watched_rename(source, target):
        real_rename(source, target)
        seen.append(os.path.isfile(export_dir / "saved_model.pb"))

    monkeypatch.setattr(os, "rename", watched_rename)
    fake_export(export_dir)
    assert _model(export_dir) == "export 2" and all(seen), seen
    assert os.listdir(tmp_path) == ["model"]


def test_a_folder_that_is_not_a_savedmodel_is_not_replaced(fake_export, tmp_path):
    export_dir = tmp_path / "model"
    export_dir.mkdir()
    (export_dir / "notes.txt").write_text("mine")
    with pytest.raises(Exception, match="holds files that are not a SavedModel; not replacing them"):
        fake_export(export_dir)
    assert (export_dir / "notes.txt").read_text() == "mine" and os.listdir(tmp_path) == ["model"]


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("mount") is None, reason="mounting a small disk needs root")
def test_a_full_disk_during_export_names_the_export_path(monkeypatch, tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], check=True, timeout=30)
    try:
        monkeypatch.setattr(export.tf.train, "latest_checkpoint", lambda folder: os.path.join(folder, "model.ckpt-1"))
        monkeypatch.setattr(export, "_write", _fake_write(size=1 << 20))
        export_dir = disk / "model"
        with pytest.raises(EnvironmentProblem) as raised:
            export.export_saved_model(None, None, "/checkpoints", str(export_dir))
        line = str(raised.value)
        assert line.startswith(f"exporting the SavedModel to --export_dir={export_dir}: the disk is full"), line
        assert "\n" not in line and os.listdir(disk) == [], os.listdir(disk)
    finally:
        subprocess.run(["umount", str(disk)], check=True, timeout=30)
