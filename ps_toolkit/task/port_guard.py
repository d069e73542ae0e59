"""Packet-filter rules that keep a task's port to loopback and the cluster's own hosts.

TensorFlow's gRPC server binds every interface (``[::]:port``) and has no
authentication: whoever reaches the port can run any operation in the task
(read and write files, assign the global step). A task that is not inside the
launcher's private network namespace therefore guards its port before it binds
it: packets to the port that do not come in on loopback or from one of the
cluster's own hosts are dropped (iptables and ip6tables, INPUT chain).

The rules are held by a small guardian process (this file run as a script)
that installs them, then waits for end-of-file on a pipe from the task. The
pipe closes whenever the task ends, however it ends (``os._exit``, a signal,
SIGKILL included), and the guardian then removes the rules. Every rule carries
the comment ``ps_toolkit port <port>``: a guardian first removes rules left on
its port by one that was itself SIGKILLed, so stale rules last only until the
next task on that port starts (and until then they only close the port further).

Where no rules can be installed (not root, no iptables, no CAP_NET_ADMIN) the
task refuses to start unless told the open port is intended: ``--allow_open_ports``
or ``PS_TOOLKIT_ALLOW_OPEN_PORTS=1``.

This module imports only the standard library: it runs as its own process.
"""

from __future__ import annotations

import ipaddress
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys

# Set to 1 to accept a port open on every interface (the flag --allow_open_ports does the same).
ALLOW_OPEN_PORTS_ENV = "PS_TOOLKIT_ALLOW_OPEN_PORTS"
# The guardian's answers on its stdout, one line each.
_READY = "ready"
_FAILED = "failed: "
# How long a task waits for its guardian to install the rules.
_START_TIMEOUT_SECS = 20.0
_TOOL_TIMEOUT_SECS = 10.0


class GuardUnavailable(Exception):
    """No rules can guard the port here; the message says why, in a few words."""


def rule_comment(port: int) -> str:
    return f"ps_toolkit port {port}"


def unavailable_reason() -> str | None:
    """Why this process cannot install packet-filter rules, or None when it may try."""
    if os.geteuid() != 0:
        return "not root, so no packet-filter rules can be installed"
    if shutil.which("iptables") is None:
        return "iptables is not installed"
    if _has_ipv6() and shutil.which("ip6tables") is None:
        return "this machine has IPv6 but ip6tables is not installed"
    return None


def _has_ipv6() -> bool:
    """True when IPv6 is enabled here (gRPC then listens on IPv6 too)."""
    try:
        with open("/proc/net/if_inet6", encoding="ascii") as handle:
            return bool(handle.read().strip())
    except OSError:
        return False


def admitted_sources(hosts: list[str]) -> tuple[list[str], list[str]]:
    """The IPv4 and IPv6 addresses of the non-loopback hosts, resolved now (loopback is always admitted)."""
    v4, v6 = set(), set()
    for host in hosts:
        for family, *_, sockaddr in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM):
            address = ipaddress.ip_address(sockaddr[0].split("%", 1)[0])
            if address.is_loopback:
                continue
            (v4 if family == socket.AF_INET else v6).add(str(address))
    return sorted(v4), sorted(v6)


def _tools() -> list[str]:
    return ["iptables", "ip6tables"] if _has_ipv6() and shutil.which("ip6tables") else ["iptables"]


def rules(port: int, v4: list[str], v6: list[str]) -> dict[str, list[list[str]]]:
    """The rule specs per tool, in insertion order: each is inserted at the top of INPUT.

    The DROP goes in first, then the ACCEPTs above it: the port is never open
    to everyone in between.
    """
    tag = ["-m", "comment", "--comment", rule_comment(port)]
    match = ["-p", "tcp", "--dport", str(port)]
    result = {}
    for tool, sources in (("iptables", v4), ("ip6tables", v6)):
        specs = [[*match, "!", "-i", "lo", *tag, "-j", "DROP"]]
        specs += [[*match, "-s", source, *tag, "-j", "ACCEPT"] for source in sources]
        result[tool] = specs
    return result


def _run(tool: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [tool, "-w", "5", *args], capture_output=True, text=True, timeout=_TOOL_TIMEOUT_SECS, check=False
    )


def installed_rules(tool: str, port: int) -> list[list[str]]:
    """The INPUT rules of ``tool`` that carry this port's comment, as specs for ``-D INPUT``."""
    listing = _run(tool, "-S", "INPUT")
    if listing.returncode != 0:
        return []
    marker = f'--comment "{rule_comment(port)}"'
    return [
        shlex.split(line)[2:] for line in listing.stdout.splitlines() if line.startswith("-A INPUT ") and marker in line
    ]


def remove_rules(port: int) -> int:
    """Removes every rule with this port's comment, from every tool; returns how many."""
    removed = 0
    for tool in _tools():
        for spec in installed_rules(tool, port):
            removed += _run(tool, "-D", "INPUT", *spec).returncode == 0
    return removed


def install_rules(port: int, v4: list[str], v6: list[str]) -> None:
    """Removes stale rules for the port, then installs fresh ones; raises GuardUnavailable (nothing left) on failure."""
    remove_rules(port)
    specs = rules(port, v4, v6)
    for tool in _tools():
        for spec in specs[tool]:
            done = _run(tool, "-I", "INPUT", "1", *spec)
            if done.returncode != 0:
                remove_rules(port)
                detail = (done.stderr.strip().splitlines() or [f"status {done.returncode}"])[-1]
                raise GuardUnavailable(f"{tool} refused a rule: {detail}")


class PortGuard:
    """A running guardian: the rules stay while this object's process lives.

    Example:
        guard = PortGuard.start(2222, ["10.0.0.5"])   # loopback and 10.0.0.5 only
        ...                                           # bind and serve
        guard.release()                               # or just exit: the rules go either way
    """

    def __init__(self, process: subprocess.Popen, port: int):
        self._process = process
        self.port = port

    @classmethod
    def start(cls, port: int, hosts: list[str]) -> PortGuard:
        reason = unavailable_reason()
        if reason:
            raise GuardUnavailable(reason)
        try:
            v4, v6 = admitted_sources(hosts)
        except (OSError, UnicodeError, ValueError) as err:
            raise GuardUnavailable(f"cannot resolve the cluster's hosts: {err}") from None
        command = [sys.executable, os.path.abspath(__file__), str(port), *(f"--allow={a}" for a in v4 + v6)]
        # A session of its own: a signal to the task's process group does not
        # reach the guardian, which lives exactly as long as the pipe from the task.
        process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True
        )
        answer = _read_line(process.stdout, _START_TIMEOUT_SECS)
        if answer != _READY:
            process.kill()
            process.wait()
            raise GuardUnavailable(
                answer[len(_FAILED) :] if answer.startswith(_FAILED) else "the guardian did not start"
            )
        return cls(process, port)

    def release(self) -> None:
        """Closes the pipe and waits (bounded) for the guardian to remove the rules."""
        if self._process.stdin and not self._process.stdin.closed:
            self._process.stdin.close()
        try:
            self._process.wait(timeout=_START_TIMEOUT_SECS)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


def _read_line(stream, timeout: float) -> str:
    import selectors

    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        if not selector.select(timeout):
            return f"{_FAILED}no answer from the guardian within {timeout:.0f}s"
    return stream.readline().strip()


def _serve(port: int, allowed: list[str]) -> int:
    """The guardian: install, say ready, wait for end-of-file on stdin, remove."""
    v4 = [a for a in allowed if ipaddress.ip_address(a).version == 4]
    v6 = [a for a in allowed if ipaddress.ip_address(a).version == 6]
    # Terminal and group signals are the task's business; the pipe says when to go.
    for number in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(number, signal.SIG_IGN)
    # Asked to stop on its own: remove the rules first.
    signal.signal(signal.SIGTERM, lambda *_: (remove_rules(port), os._exit(0)))
    try:
        install_rules(port, v4, v6)
    except (GuardUnavailable, OSError, subprocess.SubprocessError) as err:
        print(f"{_FAILED}{err}", flush=True)
        return 1
    print(_READY, flush=True)
    try:
        while sys.stdin.buffer.read(4096):
            pass
    finally:
        remove_rules(port)
    return 0


if __name__ == "__main__":
    _port = int(sys.argv[1])
    _allowed = [arg.split("=", 1)[1] for arg in sys.argv[2:] if arg.startswith("--allow=")]
    sys.exit(_serve(_port, _allowed))
