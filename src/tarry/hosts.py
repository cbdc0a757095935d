"""Which addresses a server listens on: reachable from this machine only, or from the network too."""

from __future__ import annotations

import ipaddress


def loopback(host: str) -> bool:
    """True when ``host`` is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def wildcard(host: str) -> bool:
    """True when ``host`` means every interface of this machine (``0.0.0.0``, ``::``, or empty)."""
    if host == "":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False
