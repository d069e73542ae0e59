"""Task addresses: ``host:port`` split and checked, host lists parsed, loopback hosts recognised."""

from __future__ import annotations

import ipaddress

from ps_toolkit.base.errors import ConfigError


def split_address(address: str, source: str) -> tuple[str, int]:
    """Splits 'host:port' (or '[v6]:port') into its parts, validating both.

    Args:
        address: The address.
        source: Where it came from, for messages.

    Returns:
        (host, port), the host without brackets.

    Raises:
        ConfigError: a bad host or a port outside 1-65535, naming ``address`` and ``source``.
    """
    text = address.strip()
    host, sep, port_text = text.rpartition(":")
    if not sep or not host:
        raise ConfigError(f"address {address!r} from {source} is not host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or any(c.isspace() for c in host) or "/" in host:
        raise ConfigError(f"address {address!r} from {source} has a bad host {host!r}")
    problem = _host_name_problem(host)
    if problem:
        raise ConfigError(f"address {address!r} from {source} has a bad host {host!r}: {problem}")
    # str.isdigit() also accepts '²' and '２'; a port is ASCII digits only.
    if not (port_text.isascii() and port_text.isdigit()):
        raise ConfigError(f"address {address!r} from {source} has a bad port {port_text!r}")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise ConfigError(f"address {address!r} from {source} has port {port}, outside 1-65535")
    return host, port


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` names this machine's loopback, in any spelling.

    Args:
        host: A host name or address: localhost, 127.0.0.0/8, ::1, ::ffff:127.x, in upper
            case or with a trailing dot too.

    Returns:
        True for a loopback name or address.
    """
    name = host.lower().rstrip(".")
    if name in ("localhost", "ip6-localhost"):
        return True
    try:
        address = ipaddress.ip_address(name.split("%")[0])
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def _host_name_problem(host: str) -> str | None:
    """Why ``host`` cannot be a DNS name or IP address (RFC 1035 lengths), or None."""
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
        return None
    except ValueError:
        pass
    if not host.isascii():
        return "not ASCII (give the name in its xn-- form)"
    name = host[:-1] if host.endswith(".") else host
    if len(name) > 253:
        return f"{len(name)} characters, more than a DNS name's 253"
    for label in name.split("."):
        if not label:
            return "an empty label (two dots in a row, or a leading dot)"
        if len(label) > 63:
            return f"label {label[:20]}... has {len(label)} characters, more than 63"
        if not all(c.isalnum() or c in "-_" for c in label):
            return f"label {label!r} has characters other than letters, digits, '-' and '_'"
    return None


def parse_host_list(text: str, source: str) -> tuple[str, ...]:
    """Parses a comma-separated host list such as 'a:2222,b:2222'.

    Args:
        text: The list.
        source: Where it came from, for messages (``--ps_hosts``, a cluster file, ...).

    Returns:
        The addresses, each checked to be host:port.

    Raises:
        ConfigError: an empty list or entry, or a bad address, naming ``source``.
    """
    if text is None or not str(text).strip():
        raise ConfigError(f"host list from {source} is empty")
    items = [item.strip() for item in str(text).split(",")]
    if any(not item for item in items):
        raise ConfigError(f"host list {text!r} from {source} has an empty entry")
    for item in items:
        split_address(item, source)
    return tuple(items)
