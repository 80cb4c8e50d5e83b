"""Raw measurements between two namespaces (no transport, no HTTP): TCP goodput.

Used to calibrate the lab itself: what shaping really gives, and what the
userspace delay line caps throughput at.
"""

from __future__ import annotations

import socket
import threading
import time

from .nsenter import ns_socket


def tcp_download_mbps(server_ns: str, server_addr: str, client_ns: str, nbytes: int,
                      port: int = 5001, timeout: float = 60.0) -> float:
    """Send `nbytes` from server_ns to client_ns over one TCP connection; Mbit/s."""
    family = socket.AF_INET6 if ":" in server_addr else socket.AF_INET
    srv = ns_socket(server_ns, family)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((server_addr, port))
    srv.listen(1)
    srv.settimeout(timeout)

    def serve() -> None:
        conn, _ = srv.accept()
        chunk = b"\0" * 65536
        left = nbytes
        with conn:
            while left > 0:
                left -= conn.send(chunk[:left])

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    cli = ns_socket(client_ns, family)
    cli.settimeout(timeout)
    try:
        cli.connect((server_addr, port))
        t0 = time.monotonic()
        got = 0
        while data := cli.recv(1 << 16):
            got += len(data)
        secs = time.monotonic() - t0
    finally:
        cli.close()
        t.join(timeout)
        srv.close()
    if got != nbytes:
        raise RuntimeError(f"received {got} of {nbytes} bytes")
    return got * 8 / secs / 1e6
