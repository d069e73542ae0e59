"""ps_toolkit.process.python_path: a task's PYTHONPATH against its fork server's."""

import os
import types

from ps_toolkit.process import python_path


def modules(**origins):
    """A stand-in for sys.modules: each name imported from the given file (None: a namespace package)."""
    return {name: types.SimpleNamespace(__file__=origin) for name, origin in origins.items()}


def test_entries_are_what_python_puts_on_its_path(tmp_path):
    cwd = str(tmp_path)
    assert python_path.entries("", cwd) == []
    assert python_path.entries(f"a{os.pathsep}/x/../y/{os.pathsep}", cwd) == [f"{cwd}/a", "/y", cwd]
    # site.py keeps the first of repeated folders (`export PYTHONPATH=$PYTHONPATH:/x` run twice).
    assert python_path.entries(os.pathsep.join(["/x", "a", "/x", f"{cwd}/a"]), cwd) == ["/x", f"{cwd}/a"]


def test_a_task_may_add_folders_but_not_drop_the_servers():
    assert python_path.refusal([], ["/nowhere/user"], modules(numpy="/site/numpy/__init__.py")) is None
    assert python_path.refusal(["/srv"], ["/nowhere/user", "/srv"], modules()) is None
    why = python_path.refusal(["/srv", "/lib"], ["/lib"], modules())
    assert why == "the task's PYTHONPATH lacks /srv, which the fork server imported under", why


def test_an_added_folder_may_not_hold_a_module_imported_from_elsewhere(tmp_path):
    (tmp_path / "numpy").mkdir()  # a package or a namespace package: exec would find it first
    (tmp_path / "absl.cpython-311-x86_64-linux-gnu.so").write_text("")
    (tmp_path / "ps_toolkit").mkdir()
    (tmp_path / "README").write_text("")
    folder = str(tmp_path)
    site = modules(numpy="/site/numpy/__init__.py", absl="/site/absl/__init__.py", README="/site/README.py")
    assert "holds absl.cpython-311-x86_64-linux-gnu.so," in python_path.refusal([], [folder], site)
    assert "holds numpy," in python_path.refusal([], [folder], modules(numpy=None))
    assert python_path.refusal([], [folder], modules(README="/site/README.py")) is None  # a file that is no module
    assert python_path.refusal([folder], [folder], site) is None  # the server imported under it already
    # Imported from this folder: the module exec would import too (a task adding the toolkit's checkout).
    assert python_path.refusal([], [folder], modules(ps_toolkit=f"{folder}/ps_toolkit/__init__.py")) is None


def test_a_folder_with_a_start_up_module_is_refused(tmp_path):
    """python runs a sitecustomize.py or usercustomize.py it finds on its path at start-up; a forked task cannot."""
    (tmp_path / "sitecustomize.py").write_text("")
    why = python_path.refusal([], [str(tmp_path)], modules())
    assert (
        why == f"PYTHONPATH folder {tmp_path} holds sitecustomize.py, which python runs at start-up and the fork "
        "server did not"
    ), why


def test_the_tasks_folders_replace_the_servers_after_path0():
    server_path = ["/srv/cwd", "/srv/a", "/usr/lib/python3.11", "/site"]
    task_path = python_path.task_sys_path(server_path, ["/srv/a"], ["/user", "/srv/a"], safe_path=False)
    assert task_path == ["/srv/cwd", "/user", "/srv/a", "/usr/lib/python3.11", "/site"]


def test_the_servers_folders_are_found_by_value_not_by_count():
    # PYTHONPATH=/x:/x:/x gave the server one /x (site.py drops repeats); its working folder may be one too.
    server_path = ["/work/main", "/x", "/zip", "/usr/lib/python3.11"]
    task_path = python_path.task_sys_path(
        server_path, ["/x", "/work/main"], ["/work/main", "/x", "/u"], safe_path=False
    )
    assert task_path == ["/work/main", "/x", "/u", "/zip", "/usr/lib/python3.11"]


def test_under_safe_path_no_folder_comes_first():
    """python -P (PYTHONSAFEPATH) puts neither the script's folder nor the working folder on sys.path."""
    task_path = python_path.task_sys_path(["/x", "/zip", "/stdlib"], ["/x"], ["/u", "/x"], safe_path=True)
    assert task_path == ["/u", "/x", "/zip", "/stdlib"]
