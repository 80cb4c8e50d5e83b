"""Servers with known reactions to probes, for testing probers and their
classifiers (Frolov et al., NDSS 2020, §IV mechanisms).

``threshold=N`` reads exactly N bytes and closes: a FIN if that was all, a RST
if unread bytes remain, and never a close if fewer arrive (Outline 1.0.6 with
N = 50). ``threshold=None`` reads forever (MTProto-like). ``http=True``
answers every request with a 400. Blocking sockets and threads, so a test can
hand in a socket bound inside a lab namespace.
"""

from __future__ import annotations

import socket
import threading


class ToyServer:
    def __init__(self, threshold: int | None = None, http: bool = False,
                 sock: socket.socket | None = None) -> None:
        """Serve on ``sock`` (bound and listening), or on a new loopback port."""
        self.threshold, self.http = threshold, http
        self.sock = sock if sock is not None else socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c: socket.socket) -> None:
        try:
            if self.http:
                c.recv(65536)
                c.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                c.close()
                return
            got = 0
            while self.threshold is None or got < self.threshold:
                want = 65536 if self.threshold is None else self.threshold - got
                chunk = c.recv(want)
                if not chunk:
                    return
                got += len(chunk)
            c.close()  # unread bytes in the kernel buffer make this a RST
        except OSError:
            pass

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass
