"""A run's reaper: when the launcher goes, however it goes (SIGKILL included), its tasks' sessions go too.

The launcher starts this script (``processes.RunReaper``) with a pipe on its
stdin and writes the pid of each task it starts: every task leads its own
session, so the pid is also its session id, which every descendant keeps
across re-parenting, a new process group and double forks. When the pipe
reaches end of file (the launcher has exited or died), every process still in
one of those sessions gets SIGKILL. The tasks themselves already die by
PR_SET_PDEATHSIG; this reaches what they started (a wrapper script's
children), which nothing else would: an orphan goes to init, and
PDEATHSIG is not inherited. A network namespace made for the run ends with the
last process in it, so it goes as well.

Not reached: a descendant that left its session (``setsid``, a daemon).

Standard library only, run as a script (``python -I run_reaper.py``): it starts in milliseconds.
"""

from __future__ import annotations

import os
import signal
import sys
import time

# Bounds the SIGKILL rounds (a process that forks while the first round kills is caught by the next).
_KILL_BOUND_SECS = 5.0


def _zombie(pid: int) -> bool:
    with open(f"/proc/{pid}/stat", "rb") as stat:
        return stat.read().rsplit(b")", 1)[1].split()[0] == b"Z"


def session_members(sessions: set[int], exclude: int) -> list[int]:
    """Pids of the live (not zombie) processes in ``sessions``, ``exclude`` left out."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == exclude:
            continue
        try:
            if os.getsid(int(name)) in sessions and not _zombie(int(name)):
                found.append(int(name))
        except OSError:  # gone meanwhile
            pass
    return found


def kill_sessions(sessions: set[int]) -> int:
    """SIGKILLs every process in ``sessions`` until none is left alive (bounded); returns how many kills were sent."""
    killed = 0
    deadline = time.monotonic() + _KILL_BOUND_SECS
    while sessions and time.monotonic() < deadline:
        pids = session_members(sessions, os.getpid())
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except OSError:
                pass
    return killed


def main() -> int:
    # Only the end of the launcher's pipe ends this process: a Ctrl-C meant for the run must not.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    sessions: set[int] = set()
    for line in sys.stdin.buffer:
        if line.strip().isdigit():
            sessions.add(int(line))
    kill_sessions(sessions)
    return 0


if __name__ == "__main__":
    sys.exit(main())
