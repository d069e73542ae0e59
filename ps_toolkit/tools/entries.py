"""The toolkit's own task entries and fork-server preloads, handed to the process layer as data."""

from __future__ import annotations

import os

from ps_toolkit.base import paths
from ps_toolkit.process import task_entries

# The checkout's scripts (a wheel has none: its tasks run the modules below).
RUN_TASK_SCRIPT = os.path.join(paths.PACKAGE_PARENT, "scripts", "run_task.py")
RUN_LEGACY_SCRIPT = os.path.join(paths.PACKAGE_PARENT, "scripts", "run_legacy.py")
RUN_TASK_MODULE = "ps_toolkit.tools.run_task"
# run_legacy's package: its log lines are the toolkit's, as run_task's are (launch/task_output.py).
COMPAT_PACKAGE = "ps_toolkit_compat"
RUN_LEGACY_MODULE = "ps_toolkit_compat.run_legacy"
# What a fork server imports before its first fork: TensorFlow, the path of run_task.py's tasks
# and the compat layer of run_legacy.py's, so that a forked task imports nothing more.
FORK_SERVER_PRELOAD = (
    "tensorflow",
    "absl.app",
    "ps_toolkit.cli",
    "ps_toolkit.task.runner",
    "ps_toolkit.task.roles.trainer",
    "ps_toolkit.models.classifiers",
    "ps_toolkit.training.model_check",
    "ps_toolkit.training.export",
    "ps_toolkit_compat.legacy_tf",
)
RUN_TASK = task_entries.TaskEntry(RUN_TASK_SCRIPT, RUN_TASK_MODULE, dumps_stacks=True, default=True)
# The server imports TensorFlow with the legacy Keras unless the environment says otherwise (tf_import),
# as run_task.py does; run_legacy.py always wants it, so with the modern Keras chosen it is exec'd.
RUN_LEGACY = task_entries.TaskEntry(RUN_LEGACY_SCRIPT, RUN_LEGACY_MODULE, legacy_keras_only=True)


def register() -> None:
    """Tells the process layer about run_task and run_legacy, and what a fork server preloads for them."""
    task_entries.register_task_entry(RUN_TASK)
    task_entries.register_task_entry(RUN_LEGACY)
    task_entries.register_preload(FORK_SERVER_PRELOAD)
    task_entries.register_source_package(COMPAT_PACKAGE)
