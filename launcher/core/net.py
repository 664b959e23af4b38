"""Small facts about addresses and ports, shared by the server, its children, remotes and the bench."""

from __future__ import annotations

import ipaddress
import socket


def is_loopback_host(host: str) -> bool:
    """True for this machine's own addresses and names (an IPv6 address may come in URL brackets)."""
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now (whoever binds it next does so a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
