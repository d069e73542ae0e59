"""Test helper: several "hosts" on one machine, one network namespace each, joined by a bridge. Root only.

The bridge lives in a 'switch' namespace of its own, so nothing is added to
the machine's own network. Every namespace is named (``ip netns``) so tests
can run commands in it, and ``remove()`` kills whatever still runs inside
before deleting it.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess

SUBNET = "10.213.0"  # exists only inside the test's namespaces


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


class Namespaces:
    """A 'switch' namespace holding a bridge, and one namespace per task joined to it by a veth pair.

    Example:
        spaces = Namespaces(3).create()
        try:
            subprocess.run(spaces.command(0, "ping", "-c1", spaces.addresses[1]))
        finally:
            spaces.remove()
    """

    def __init__(self, count: int):
        self.prefix = f"pstk-{secrets.token_hex(4)}"
        self.switch = f"{self.prefix}-sw"
        self.names = [f"{self.prefix}-t{i}" for i in range(count)]
        self.addresses = [f"{SUBNET}.{i + 2}" for i in range(count)]

    def create(self) -> Namespaces:
        """Creates every namespace; on a failure part-way, removes what was made and re-raises."""
        try:
            ip("netns", "add", self.switch)
            ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            ip("-n", self.switch, "link", "set", "br0", "up")
            for i, (name, address) in enumerate(zip(self.names, self.addresses, strict=True)):
                ip("netns", "add", name)
                ip("-n", name, "link", "set", "lo", "up")
                ip("-n", self.switch, "link", "add", f"p{i}", "type", "veth", "peer", "name", "eth0", "netns", name)
                ip("-n", self.switch, "link", "set", f"p{i}", "master", "br0")
                ip("-n", self.switch, "link", "set", f"p{i}", "up")
                ip("-n", name, "addr", "add", f"{address}/24", "dev", "eth0")
                ip("-n", name, "link", "set", "eth0", "up")
        except BaseException:
            self.remove()
            raise
        return self

    def command(self, index: int, *command: str) -> list:
        return ["ip", "netns", "exec", self.names[index], *command]

    def set_hosts(self, entries: dict[str, str]) -> None:
        """Names every namespace resolves: `ip netns exec` mounts /etc/netns/<name>/hosts over /etc/hosts."""
        text = "127.0.0.1 localhost\n" + "".join(f"{address} {host}\n" for host, address in entries.items())
        for name in self.names:
            os.makedirs(f"/etc/netns/{name}", exist_ok=True)
            with open(f"/etc/netns/{name}/hosts", "w", encoding="ascii") as handle:
                handle.write(text)

    def shape(self, qdisc: list) -> None:
        for name in self.names:
            subprocess.run(["tc", "-n", name, "qdisc", "replace", "dev", "eth0", "root", *qdisc], check=True)

    def unshape(self) -> None:
        for name in self.names:
            subprocess.run(["tc", "-n", name, "qdisc", "del", "dev", "eth0", "root"], capture_output=True, check=False)

    def remove(self) -> None:
        """Kills whatever still runs inside, then deletes every namespace (their veths and bridge go too)."""
        for name in [*self.names, self.switch]:
            pids = ip("netns", "pids", name, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            ip("netns", "del", name, check=False)
            shutil.rmtree(f"/etc/netns/{name}", ignore_errors=True)


def qdisc_support(qdisc: list) -> str | None:
    """None if this kernel accepts the qdisc, else why not (checked in a scratch namespace)."""
    if shutil.which("tc") is None:
        return "tc (iproute2) is not installed"
    scratch = f"pstk-{secrets.token_hex(4)}-probe"
    ip("netns", "add", scratch)
    try:
        ip("-n", scratch, "link", "set", "lo", "up")
        done = subprocess.run(
            ["tc", "-n", scratch, "qdisc", "add", "dev", "lo", "root", *qdisc], capture_output=True, text=True
        )
        return None if done.returncode == 0 else f"'tc qdisc add ... {' '.join(qdisc)}' fails: {done.stderr.strip()}"
    finally:
        ip("netns", "del", scratch, check=False)
