"""Packet-filter rules that keep a task's port to loopback and the cluster's own hosts.

Imports only the standard library: it runs as its own process.
Design: docs/design.md, "One start-up, and keeping the ports private".
"""

from __future__ import annotations

import ipaddress
import os
import re
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


def rule_comment(port: int, owner: str | None = None) -> str:
    """The comment on a guard's rules: its port and its guardian (``owner_id``); no owner: an older version's."""
    return f"ps_toolkit port {port}" + (f" owner {owner}" if owner else "")


_COMMENT = re.compile(r"^ps_toolkit port (\d+)(?: owner (\d+)\.(\d+))?$")


def owner_id(pid: int) -> str | None:
    """``<pid>.<start time in clock ticks since boot>``: names one process, never a later one with the same pid."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] in ("Z", "X"):
        return None
    return f"{pid}.{fields[19]}"


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


def tools() -> list[str]:
    return ["iptables", "ip6tables"] if _has_ipv6() and shutil.which("ip6tables") else ["iptables"]


def rules(port: int, v4: list[str], v6: list[str], owner: str) -> dict[str, list[list[str]]]:
    """The rule specs per tool, in insertion order: each is inserted at the top of INPUT.

    The DROP goes in first, then the ACCEPTs above it: the port is never open
    to everyone in between.
    """
    tag = ["-m", "comment", "--comment", rule_comment(port, owner)]
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


def guard_rules(tool: str) -> list[tuple[list[str], int, str | None]]:
    """Every guard's INPUT rule of ``tool``: (spec for ``-D INPUT``, port, owner or None)."""
    listing = _run(tool, "-S", "INPUT")
    if listing.returncode != 0:
        return []
    found = []
    for line in listing.stdout.splitlines():
        if not line.startswith("-A INPUT ") or "ps_toolkit port " not in line:
            continue
        spec = shlex.split(line)[2:]
        comment = spec[spec.index("--comment") + 1] if "--comment" in spec[:-1] else ""
        match = _COMMENT.match(comment)
        if match:
            owner = f"{match[2]}.{match[3]}" if match[2] else None
            found.append((spec, int(match[1]), owner))
    return found


def installed_rules(tool: str, port: int, owner: str | None = None) -> list[list[str]]:
    """The INPUT rules of ``tool`` that carry exactly this port's and owner's comment."""
    return [spec for spec, rule_port, rule_owner in guard_rules(tool) if (rule_port, rule_owner) == (port, owner)]


def remove_rules(port: int, owner: str | None) -> int:
    """Removes the rules this owner installed on this port, from every tool; returns how many."""
    removed = 0
    for tool in tools():
        for spec in installed_rules(tool, port, owner):
            removed += _run(tool, "-D", "INPUT", *spec).returncode == 0
    return removed


def remove_stale_rules(port: int) -> int:
    """Removes the rules whose guardian no longer runs (any port), and older versions' owner-less ones on ``port``."""
    removed = 0
    for tool in tools():
        for spec, rule_port, owner in guard_rules(tool):
            stale = rule_port == port if owner is None else owner_id(int(owner.split(".")[0])) != owner
            if stale:
                removed += _run(tool, "-D", "INPUT", *spec).returncode == 0
    return removed


def install_rules(port: int, v4: list[str], v6: list[str], owner: str) -> None:
    """Removes stale rules, then installs this owner's; raises GuardUnavailable (none of its own left) on failure."""
    remove_stale_rules(port)
    specs = rules(port, v4, v6, owner)
    for tool in tools():
        for spec in specs[tool]:
            done = _run(tool, "-I", "INPUT", "1", *spec)
            if done.returncode != 0:
                remove_rules(port, owner)
                detail = (done.stderr.strip().splitlines() or [f"status {done.returncode}"])[-1]
                raise GuardUnavailable(f"{tool} refused a rule: {detail}")


class PortGuard:
    """A running guardian: the rules stay while this object's process lives, and go after it.

    Example:
        guard = PortGuard.start(2222, ["10.0.0.5"])   # loopback and 10.0.0.5 only
        ...                                           # bind and serve
        guard.release()                               # or just exit: the rules go either way
    """

    def __init__(self, process: subprocess.Popen, port: int, owner: str):
        self._process = process
        self.port = port
        self.owner = owner  # the guardian's owner_id, in its rules' comment

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
        # A session of its own, and (its first process exits at once) no longer this process's
        # descendant: neither a signal to the task's group nor a kill of its tree reaches the
        # guardian, which lives exactly as long as the pipe from the task.
        process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True
        )
        answer = _read_line(process.stdout, _START_TIMEOUT_SECS)
        if not answer.startswith(_READY):
            process.stdin.close()  # a guardian still starting removes what it installed and ends
            process.stdout.close()
            process.wait(timeout=_START_TIMEOUT_SECS)
            raise GuardUnavailable(
                answer[len(_FAILED) :] if answer.startswith(_FAILED) else "the guardian did not start"
            )
        process.wait(timeout=_START_TIMEOUT_SECS)  # the first process, which exited once the guardian forked
        return cls(process, port, answer[len(_READY) :].strip())

    def release(self) -> None:
        """Closes the pipe and waits (bounded) for the guardian to remove the rules (its stdout then ends)."""
        if self._process.stdin and not self._process.stdin.closed:
            self._process.stdin.close()
        answer = _read_line(self._process.stdout, _START_TIMEOUT_SECS)
        if answer.startswith(_FAILED):  # no end within the bound: asked to remove them now
            pid = int(self.owner.split(".")[0])
            if owner_id(pid) == self.owner:
                os.kill(pid, signal.SIGTERM)
        self._process.stdout.close()


def _read_line(stream, timeout: float) -> str:
    """The next line (or "" at its end) within ``timeout``, else a failure line."""
    import selectors

    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        if not selector.select(timeout):
            return f"{_FAILED}no answer from the guardian within {timeout:.0f}s"
    return stream.readline().strip()


def _serve(port: int, allowed: list[str]) -> int:
    """The guardian: leave the task's tree, install, say ready, wait for end-of-file on stdin, remove."""
    if os.fork() != 0:
        os._exit(0)  # the task reaps this first process; the guardian is re-parented away from the task's tree
    owner = owner_id(os.getpid())
    v4 = [a for a in allowed if ipaddress.ip_address(a).version == 4]
    v6 = [a for a in allowed if ipaddress.ip_address(a).version == 6]
    # Terminal and group signals are the task's business; the pipe says when to go.
    for number in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(number, signal.SIG_IGN)
    # Asked to stop on its own: remove the rules first.
    signal.signal(signal.SIGTERM, lambda *_: (remove_rules(port, owner), os._exit(0)))
    try:
        install_rules(port, v4, v6, owner)
    except (GuardUnavailable, OSError, subprocess.SubprocessError) as err:
        print(f"{_FAILED}{err}", flush=True)
        return 1
    print(f"{_READY} {owner}", flush=True)
    try:
        while sys.stdin.buffer.read(4096):
            pass
    finally:
        remove_rules(port, owner)
    return 0


if __name__ == "__main__":
    _port = int(sys.argv[1])
    _allowed = [arg.split("=", 1)[1] for arg in sys.argv[2:] if arg.startswith("--allow=")]
    sys.exit(_serve(_port, _allowed))
