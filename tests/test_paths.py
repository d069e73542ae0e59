"""Private per-user state (base.paths) and per-user port locks (launch.ports): no cluster needed."""

import os
import socket
import stat

import pytest

from ps_toolkit.base import paths
from ps_toolkit.base.errors import ConfigError
from ps_toolkit.launch import ports


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """TMPDIR of this test's own, so the state folder is created fresh."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    return tmp_path


def test_state_dir_is_created_mode_700_and_owned_by_this_user(private_tmp):
    path = paths.state_dir()
    assert path == str(private_tmp / f"ps_toolkit-{os.getuid()}")
    info = os.lstat(path)
    assert stat.S_IMODE(info.st_mode) == 0o700
    assert info.st_uid == os.getuid()


@pytest.mark.root("a folder owned by another user is planted with chown")
def test_a_state_dir_owned_by_another_user_is_refused(private_tmp):
    planted = private_tmp / f"ps_toolkit-{os.getuid()}"
    planted.mkdir(mode=0o700)
    os.chown(planted, 65534, 65534)
    with pytest.raises(ConfigError, match=r"owned by uid 65534, not by you"):
        paths.state_dir()


def test_a_state_dir_that_is_a_symlink_is_refused(private_tmp):
    target = private_tmp / "elsewhere"
    target.mkdir(mode=0o700)
    os.symlink(target, private_tmp / f"ps_toolkit-{os.getuid()}")
    with pytest.raises(ConfigError, match=r"symbolic link"):
        paths.state_subdir("runs")


def test_a_state_dir_open_to_others_is_refused(private_tmp):
    planted = private_tmp / f"ps_toolkit-{os.getuid()}"
    planted.mkdir()
    os.chmod(planted, 0o777)
    with pytest.raises(ConfigError, match=r"mode is 777"):
        paths.state_dir()


def test_write_file_nofollow_refuses_a_planted_symlink_and_leaves_its_target_alone(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("secret")
    os.chmod(victim, 0o600)
    os.symlink(victim, tmp_path / "flags.json")
    with pytest.raises(ConfigError, match=r"flags.json: it is a symbolic link"):
        paths.write_file_nofollow(str(tmp_path / "flags.json"), "{}")
    assert victim.read_text() == "secret"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["flags.json", "victim"]


def test_write_file_nofollow_replaces_a_regular_file(tmp_path):
    target = tmp_path / "flags.json"
    target.write_text("old")
    paths.write_file_nofollow(str(target), "new")
    assert target.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["flags.json"]


def test_run_folders_are_pruned_to_the_newest_but_never_one_in_use(tmp_path):
    in_use = paths.new_run_dir("run", parent=str(tmp_path), keep=3)
    made = []
    for age in range(5):
        path = tmp_path / f"run-20200101-00000{age}-old{age}"
        path.mkdir()
        os.utime(path, (1_000_000 + age, 1_000_000 + age))
        made.append(path)
    os.utime(in_use, (0, 0))  # the oldest of all, but still held
    newest = paths.new_run_dir("run", parent=str(tmp_path), keep=3)
    left = sorted(p.name for p in tmp_path.iterdir())
    # keep=3: the new folder and the two newest old ones, plus the one in use.
    assert left == sorted([made[3].name, made[4].name, os.path.basename(in_use), os.path.basename(newest)])
    paths.release_run_dir(in_use)
    paths.release_run_dir(newest)
    paths.prune_runs(str(tmp_path), keep=1)
    assert [p.name for p in tmp_path.iterdir()] == [os.path.basename(newest)]


def test_prune_leaves_folders_it_did_not_make(tmp_path):
    (tmp_path / "my-results").mkdir()
    paths.prune_runs(str(tmp_path), keep=0)
    assert (tmp_path / "my-results").is_dir()


def test_port_locks_are_removed_on_release(tmp_path):
    with ports.reserve_ports(3, lock_dir=str(tmp_path)) as reservation:
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{p}.lock" for p in reservation.ports)
        assert all(ports.port_is_reserved(p, str(tmp_path)) for p in reservation.ports)
    assert list(tmp_path.iterdir()) == []


def test_a_stale_port_lock_is_reclaimed(tmp_path):
    (tmp_path / "12345.lock").write_text("")  # left by a launcher killed with SIGKILL: nobody holds it
    with ports.reserve_ports(1, lock_dir=str(tmp_path)) as reservation:
        assert not (tmp_path / "12345.lock").exists()
        assert reservation.ports[0] != 12345 or ports.port_is_reserved(12345, str(tmp_path))


def test_a_held_port_lock_is_not_taken_again(tmp_path):
    with ports.reserve_ports(1, lock_dir=str(tmp_path)) as first:
        port = first.ports[0]

        class OnlyThatPort:
            def randint(self, low, high):
                return port

        with pytest.raises(RuntimeError, match="could not find 1 free ports"):
            ports.reserve_ports(1, rng=OnlyThatPort(), attempts=5, lock_dir=str(tmp_path))
        assert ports.port_is_reserved(port, str(tmp_path))


def test_the_default_port_lock_folder_is_private(private_tmp):
    with ports.reserve_ports(1) as reservation:
        lock_dir = private_tmp / f"ps_toolkit-{os.getuid()}" / "ports"
        assert (lock_dir / f"{reservation.ports[0]}.lock").exists()
        assert stat.S_IMODE(os.lstat(lock_dir).st_mode) == 0o700


def test_a_socket_deeper_than_a_socket_address_holds_is_bound_and_reached(tmp_path):
    folder = tmp_path / ("d" * 60) / ("e" * 60)
    folder.mkdir(parents=True)
    path = str(folder / "server.sock")
    assert len(path) > 108
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with paths.socket_address(path) as address:
            listener.bind(address)
        listener.listen(1)
        with paths.socket_address(path) as address:
            client.connect(address)
        assert os.path.exists(path)
    finally:
        client.close()
        listener.close()
