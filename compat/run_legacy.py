"""Runs a TensorFlow 1.x script unchanged on TensorFlow 2.21, through the compat layer.

    python scripts/run_legacy.py old_script.py --job_name=worker --task_index=0 ...
    python scripts/run_legacy.py -m trainer.task --job-dir=/tmp/job    # a package's module, as python -m runs it
    python scripts/launch_local.py --num_ps=1 --num_workers=2 -- python scripts/run_legacy.py old_script.py
    ps-run-legacy old_script.py ...            # installed: also python -m ps_toolkit_compat.run_legacy

The legacy ``tensorflow`` module (compat/legacy_tf.py, installed as
``ps_toolkit_compat.legacy_tf``) is installed before
the script runs, so its ``import tensorflow as tf`` gets the TF 1.x API. The
script runs as ``__main__`` with its own argv; ``-m MODULE`` runs a module found
from the current directory (its package's relative imports work), as ``python -m``
does. Cluster flags that a launcher appended and the script does not define are
skipped by its argparse or absl parsing (compat/cluster_args.py). A removed symbol,
missing MNIST files or other bad input end it with one line on stderr and exit status 2.
"""

import importlib.util
import os
import runpy
import sys

EXIT_CONFIG = 2  # ps_toolkit.base.errors.EXIT_CONFIG, before anything heavy is imported


def _fail(message: str) -> None:
    sys.stderr.write(f"run_legacy.py: error: {message}\n")
    sys.exit(EXIT_CONFIG)


def run(argv: list[str]) -> None:
    """Runs ``argv[1]`` as ``__main__`` with the rest of ``argv`` as its arguments, the legacy layer installed."""
    from ps_toolkit.task import tolerant_streams

    tolerant_streams.install()  # a full log disk drops output instead of ending the script
    if len(argv) == 2 and argv[1] in ("--help", "-h", "--helpfull"):
        sys.stdout.write(__doc__.strip() + "\n\nrun_legacy.py has no flags of its own; the script's follow it.\n")
        sys.exit(0)
    module = argv[2] if len(argv) > 2 and argv[1] == "-m" else None
    if module is None and (len(argv) < 2 or argv[1].startswith("-")):
        _fail("usage: run_legacy.py SCRIPT.py [SCRIPT ARGS...] or run_legacy.py -m MODULE [ARGS...]")
    script = argv[1]
    if module is None and not os.path.isfile(script):
        _fail(f"script {script} does not exist")
    from ps_toolkit.task import startup

    # Ctrl-C of a hand-started task, a ps in server.join() included: one line, exit 130.
    startup.exit_on_interrupt(f"run_legacy.py {os.path.basename(script)}")
    # Before TensorFlow is imported: tf.layers needs the legacy Keras (tf-keras).
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    from ps_toolkit.base.errors import ToolkitError
    from ps_toolkit_compat import cluster_args, legacy_tf

    legacy_tf.install()
    cluster_args.install()
    try:
        if module is not None:
            _run_module(module, argv[3:])
        else:
            sys.argv = [script, *argv[2:]]
            sys.path.insert(0, os.path.dirname(os.path.abspath(script)))  # as ``python script.py`` would
            runpy.run_path(script, run_name="__main__")
    except ToolkitError as err:
        where = _user_line(err) if isinstance(err, ImportError | AttributeError) else None
        sys.stderr.write(f"{where or os.path.basename(module or script)}: error: {err}\n")
        sys.exit(err.exit_code)


def _user_line(err: BaseException) -> str | None:
    """'FILE:LINE' of the innermost frame of the user's own code in ``err``'s traceback: where a removed
    name was used (a module the script imported, not always the script), or None."""
    import traceback

    from ps_toolkit.base.paths import PACKAGE_PARENT

    own = (os.path.join(PACKAGE_PARENT, "ps_toolkit") + os.sep, os.path.dirname(os.path.abspath(__file__)) + os.sep)
    frames = [
        frame
        for frame in traceback.extract_tb(err.__traceback__)
        if not frame.filename.startswith(("<", *own)) and frame.filename != runpy.__file__
    ]
    if not frames:
        return None
    path = os.path.relpath(frames[-1].filename)
    return f"{frames[-1].filename if path.startswith('..') else path}:{frames[-1].lineno}"


def _run_module(module: str, args: list[str]) -> None:
    """Runs ``module`` as ``python -m module args`` would: found from the current directory, as ``__main__``."""
    sys.path.insert(0, os.getcwd())
    try:
        found = importlib.util.find_spec(module)
    except ModuleNotFoundError as err:
        if not (err.name and module.startswith(err.name)):
            raise  # the package's own import of something else: its error, as python -m shows it
        found = None  # a parent package that is not there
    except (ValueError, ImportError, TypeError):  # an empty name, or a relative one with no package to be in
        found = None
    if found is None:
        _fail(f"no module named {module!r} (from {os.getcwd()} and the Python path)")
    if found.submodule_search_locations is not None and importlib.util.find_spec(f"{module}.__main__") is None:
        _fail(f"{module!r} is a package with no __main__ module, so it cannot be run (python -m says the same)")
    sys.argv = [module, *args]  # run_module puts the module's file in argv[0]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def main() -> None:
    """The ``ps-run-legacy`` command."""
    run(sys.argv)


if __name__ == "__main__":
    main()
