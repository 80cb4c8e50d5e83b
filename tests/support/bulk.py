"""A server that answers one client flight with a bulk of bytes, in a lab namespace,
and a client that counts what arrives: for censors that act on server bytes."""

from __future__ import annotations

import socket
import threading
from typing import Any

from netns.nsenter import ns_socket


def bulk_server(lab: Any, port: int, size: int, role: str = "bridge") -> socket.socket:
    """Listen on `role`'s address; each connection's first read is answered with
    `size` zero bytes. Close the returned socket to stop it."""
    srv = ns_socket(lab.ns(role))
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((lab.addr(role), port))
    srv.listen(8)

    def answer(c: socket.socket) -> None:
        with c:
            try:
                c.recv(65536)  # the ClientHello
                c.sendall(bytes(size))
            except OSError:
                pass

    def serve() -> None:
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=answer, args=(c,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return srv


def read_after(lab: Any, server: str, port: int, first: bytes, size: int,
               idle_s: float = 1.0) -> tuple[int, str]:
    """Send `first` from the client node and read until `size` bytes, EOF, a reset or
    `idle_s` without a byte: (bytes received, "complete" | "eof" | "reset" | "stalled")."""
    s = ns_socket(lab.ns("client"))
    s.settimeout(5)
    got = 0
    try:
        s.connect((server, port))
        s.sendall(first)
        s.settimeout(idle_s)
        while got < size:
            chunk = s.recv(65536)
            if not chunk:
                return got, "eof"
            got += len(chunk)
        return got, "complete"
    except TimeoutError:
        return got, "stalled"
    except ConnectionResetError:
        return got, "reset"
    finally:
        s.close()
