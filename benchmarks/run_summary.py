"""The launcher's summary.txt, read: each task's exit status as its table gives it."""

from __future__ import annotations

# The exit status column of a task that ended by itself with status 0.
FINISHED = "0 (finished)"


def task_ends(summary: str) -> dict[str, str]:
    """Each task's exit status column of a launcher summary table ({'ps:0': '0 (finished)', ...})."""
    lines = summary.splitlines()
    header = next((i for i, line in enumerate(lines) if line.startswith("task ") and "exit status" in line), None)
    if header is None:
        return {}
    start = lines[header].index("exit status")
    end = lines[header].index("restarts")
    ends = {}
    for line in lines[header + 2 :]:
        if not line.strip():
            break
        ends[line.split()[0]] = line[start:end].strip()
    return ends
