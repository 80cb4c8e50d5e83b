"""``HOST:PORT`` command-line arguments (IPv6 hosts in brackets)."""

from __future__ import annotations


def split_hostport(text: str) -> tuple[str, int]:
    """(host, port) from ``HOST:PORT`` or ``[V6]:PORT``; ValueError says what is wrong."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)
