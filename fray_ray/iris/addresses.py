"""Controller addresses as users write them, and the one form the client dials."""

from __future__ import annotations

__all__ = ["normalize_address"]


def normalize_address(address: str) -> str:
    """`iris://host:port`, `host:port` or `http://host:port` → `http://host:port`."""
    address = address.strip().rstrip("/")
    if address.startswith("iris://"):
        address = "http://" + address[len("iris://") :]
    elif "://" not in address:
        address = "http://" + address
    return address
