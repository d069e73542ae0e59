"""Why a chief that did nothing may have done nothing: the script's code names a chief role this cluster lacks.

A TF 1.x script dispatches on its job name (``if job_name == 'master': ...``).
Given a job name its code never names (``chief`` where it knows only
``master``), its chief falls through every branch and exits 0 having done
nothing. ``chief_role_hint`` reads the script the task command runs (a
``.py`` file among its arguments, or the module after ``-m``, found from the
working directory) for the role names it quotes, and says which flag gives
the chief the name the script knows.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence

# A quoted role name in the script's source: 'master', "chief".
_QUOTED_ROLE = re.compile(r"""['"](master|chief)['"]""")
# Scripts larger than this are not read (a hint is not worth reading a data file).
_MAX_SOURCE_BYTES = 2 << 20


def script_files(argv: Sequence[str], cwd: str) -> list[str]:
    """The user's script files in a task command: ``.py`` arguments past the toolkit's own
    run_legacy.py / run_task.py, and ``-m package.module`` resolved from ``cwd``."""
    found = []
    for position, arg in enumerate(argv):
        if arg.endswith(".py") and os.path.basename(arg) not in ("run_legacy.py", "run_task.py"):
            found.append(arg if os.path.isabs(arg) else os.path.join(cwd, arg))
        elif arg == "-m" and position + 1 < len(argv):
            base = os.path.join(cwd, *argv[position + 1].split("."))
            found += [base + ".py", os.path.join(base, "__main__.py")]
    return [path for path in found if os.path.isfile(path)]


def _quoted_roles(path: str) -> dict[str, int]:
    """Each quoted chief role name in ``path`` and the first line that quotes it."""
    try:
        if os.path.getsize(path) > _MAX_SOURCE_BYTES:
            return {}
        with open(path, encoding="utf-8", errors="replace") as source:
            lines = source.read().splitlines()
    except OSError:
        return {}
    roles: dict[str, int] = {}
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith("#"):
            continue
        for role in _QUOTED_ROLE.findall(line):
            roles.setdefault(role, number)
    return roles


def task_type(env: Mapping[str, str], default: str) -> str:
    """The job name a task's TF_CONFIG gives it (``master`` under --chief_role_name=master), else ``default``."""
    try:
        task = json.loads(env.get("TF_CONFIG") or "{}").get("task") or {}
    except (ValueError, AttributeError):
        return default
    role = task.get("type") if isinstance(task, dict) else None
    return role if isinstance(role, str) and role else default


def chief_role_hint(argv: Sequence[str], cwd: str, chief_job: str) -> str:
    """A sentence naming the likely cause and the flag to try, or '' when the script shows none.

    ``chief_job``: the job name the chief had in this cluster (``chief``, ``master``, or ``worker``
    when worker 0 is the chief).
    """
    for path in script_files(argv, cwd):
        roles = _quoted_roles(path)
        if not roles or chief_job in roles:
            continue
        role, line = min(roles.items(), key=lambda item: item[1])
        where = f"{os.path.relpath(path, cwd)}:{line}"
        if chief_job == "worker":
            flag = "--chief" + ("" if role == "chief" else " --chief_role_name=master")
        else:
            flag = f"--chief_role_name={role}"
        return (
            f"likely cause: the script's code names the chief role {role!r} ({where}), which this cluster "
            f"does not use (its chief's job name is {chief_job!r}); try {flag}"
        )
    return ""
