"""The one start-up of a task, whichever way it was started: checks, port protection, title, signals, exit.

Design: docs/design.md, "One start-up, and keeping the ports private".
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import sys
import threading

from ps_toolkit.base import tf_internals
from ps_toolkit.base.errors import ConfigError
from ps_toolkit.cluster import preflight
from ps_toolkit.cluster.addresses import is_loopback_host, split_address
from ps_toolkit.cluster.config import EVALUATOR, ClusterConfig
from ps_toolkit.network import cluster_netns, open_ports

log = logging.getLogger(__name__)
EXIT_INTERRUPTED = 130  # what a shell reports for a program ended by SIGINT


def begin(cluster: ClusterConfig, *, allow_open_ports: bool = False, checks: bool = True) -> str:
    """Everything a task does before it binds its port; returns how its port is kept private, in a few words.

    Raises ConfigError (nothing started) for a bad topology, a taken or privileged
    port, or a port that would be open and cannot be protected. A task with
    threads that must join its cluster's namespace is executed again inside it
    (this call then does not return; the new process repeats what ran before it).
    """
    set_title(f"{cluster.task_type}:{cluster.task_index}")
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    cluster_netns.adopt_inherited_membership()
    if checks:
        preflight.check_topology(cluster)
    protection = protect_port(cluster, allow_open_ports)
    if checks:
        preflight.check_task_can_start(cluster)  # in the namespace the task now serves in
    log.info("%s of %s: its port is %s", cluster.device, cluster.source, protection)
    return protection


def protect_port(cluster: ClusterConfig, allow_open_ports: bool) -> str:
    """The namespace, the rules or the refusal (see the module docstring)."""
    if cluster_netns.joined():
        return "in a private network namespace"
    if open_ports.open_ports_allowed(allow_open_ports):
        return open_ports.guard_task_port(cluster, allow_open_ports)
    addresses = [a for job, hosts in cluster.jobs.items() if job != EVALUATOR for a in hosts]
    why_not = None
    if all(is_loopback_host(split_address(a, cluster.source)[0]) for a in addresses):
        why_not = os.environ.pop(cluster_netns.JOIN_FAILED_ENV, None)
        if why_not is None:
            why_not = _join(cluster_netns.cluster_key(addresses))
        if why_not is None:
            return "in the cluster's private network namespace"
    try:
        return open_ports.guard_task_port(cluster, allow_open_ports)
    except ConfigError as err:
        if why_not is None:
            raise
        raise ConfigError(f"{err}; no private network namespace either: {why_not}") from None


def _join(key: str) -> str | None:
    """Joins the cluster's namespace; None, or why it cannot."""
    if len(os.listdir("/proc/self/task")) > 1:
        if len(sys.orig_argv) < 2 or sys.orig_argv[-1] == "-i" or not sys.argv or not sys.argv[0]:
            return "an interactive process with threads cannot join a network namespace"
        cluster_netns.join_by_reexec(key)  # does not return
    try:
        cluster_netns.join(key)
    except cluster_netns.JoinFailed as err:
        return str(err)
    return None


def set_title(role: str) -> None:
    """``ps_toolkit ROLE <the arguments the task was started with>`` as ps, top and pgrep -f see it."""
    import setproctitle

    name = setproctitle.getthreadtitle()  # the short name (ps -e, psutil's name()): kept
    setproctitle.setproctitle(f"ps_toolkit {role} {' '.join(sys.argv)}".strip())
    setproctitle.setthreadtitle(name)


def exit_on_interrupt(label: str) -> None:
    """Ctrl-C (SIGINT) ends this process with one line, its port rules and AutoGraph files removed."""

    def interrupted(_signum, _frame):
        sys.stderr.write(f"{label}: interrupted (Ctrl-C); exiting\n")
        open_ports.release()
        finish(EXIT_INTERRUPTED)

    # Started with SIGINT ignored (a shell's ``&``, nohup): Ctrl-C is meant not to reach it.
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, interrupted)


def stop_on_signals(label: str) -> None:
    """SIGTERM or Ctrl-C asks training to stop (a job with no step limit): the chief saves, every task
    ends with exit 0; a ps serves until its replicas are done. A second signal ends the process at once.

    The signals are taken by a thread of their own (``sigwait``), blocked everywhere else: a Python
    handler runs only when the main thread is in Python, and a step that waits for input never returns
    to it until the stop request ends that input. Call it before TensorFlow starts its threads (they
    inherit the blocked signals) and after ``begin`` (a task with threads would be executed again there).
    """
    from ps_toolkit.training import stop_request

    signals = {signal.SIGTERM}
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # started with Ctrl-C meant not to reach it
        signals.add(signal.SIGINT)
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)

    def take_signals():
        while True:
            name = signal.Signals(signal.sigwait(signals)).name
            if stop_request.requested():
                sys.stderr.write(f"{label}: {name} again; exiting now\n")
                open_ports.release()
                finish(EXIT_INTERRUPTED)
            sys.stderr.write(f"{label}: {name}: stopping after this step (again: at once)\n")
            stop_request.request()

    threading.Thread(target=take_signals, name="stop-signals", daemon=True).start()


def finish(code: int = 0) -> None:
    """Ends the process now: tearing down TensorFlow and its gRPC server takes seconds, and every
    result is flushed. Removes first what the skipped interpreter exit would have removed."""
    tf_internals.remove_autograph_files()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    logging.shutdown()
    os._exit(code)
