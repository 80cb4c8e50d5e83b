"""observe() tells data+FIN, RST, silence and refusal apart on loopback.

The servers are plain blocking sockets in threads, not asyncio streams: asyncio
reads everything into userspace at once, which would hide the Linux rule Frolov
relies on (close() with unread bytes in the kernel buffer sends a RST).
"""

import json
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from censor_sim.prober.__main__ import main
from censor_sim.prober.observe import observe, run_suite
from censor_sim.prober.probes import Probe, frolov_suite

Behaviour = Callable[[socket.socket], None]
HELLO = Probe("hello", b"hello server")


@contextmanager
def server(behaviour: Behaviour) -> Iterator[tuple[int, dict]]:
    """A loopback TCP server running `behaviour(conn)` per connection in a thread."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(64)
    stats = {"active": 0, "max_active": 0}
    lock = threading.Lock()
    stop = threading.Event()

    def handle(conn: socket.socket) -> None:
        with lock:
            stats["active"] += 1
            stats["max_active"] = max(stats["max_active"], stats["active"])
        try:
            behaviour(conn)
        except OSError:
            pass
        finally:
            with lock:
                stats["active"] -= 1
            conn.close()

    def accept_loop() -> None:
        lsock.settimeout(0.05)
        while not stop.is_set():
            try:
                conn, _ = lsock.accept()
            except TimeoutError:
                continue
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    t = threading.Thread(target=accept_loop, daemon=True)
    t.start()
    try:
        yield lsock.getsockname()[1], stats
    finally:
        stop.set()
        t.join(2)
        lsock.close()


def reply_then_fin(conn: socket.socket) -> None:
    conn.recv(100)
    conn.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n")


def abort(conn: socket.socket) -> None:
    conn.recv(100)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def close_with_unread(conn: socket.socket) -> None:
    time.sleep(0.1)  # let the whole probe land in the kernel buffer
    conn.recv(3)


def silent(conn: socket.socket) -> None:
    conn.settimeout(3)
    while conn.recv(4096):
        pass


def fin_after(delay: float) -> Behaviour:
    def behaviour(conn: socket.socket) -> None:
        conn.settimeout(delay)
        try:
            while conn.recv(4096):
                pass
        except TimeoutError:
            pass
    return behaviour


async def test_data_then_fin():
    with server(reply_then_fin) as (port, _):
        r = await observe("127.0.0.1", port, HELLO, watch_s=2)
    assert r.connected and r.close == "FIN" and r.sent == len(HELLO.payload)
    assert r.response == b"HTTP/1.0 400 Bad Request\r\n\r\n" and r.response_len == 28
    assert r.first_data_after_s is not None and r.close_after_s < 1.5


async def test_response_is_truncated_but_counted():
    def big(conn: socket.socket) -> None:
        conn.recv(100)
        conn.sendall(b"x" * 10000)
    with server(big) as (port, _):
        r = await observe("127.0.0.1", port, HELLO, watch_s=2, max_response=100)
    assert r.response == b"x" * 100 and r.response_len == 10000 and r.close == "FIN"


async def test_so_linger_zero_is_rst():
    with server(abort) as (port, _):
        r = await observe("127.0.0.1", port, HELLO, watch_s=2)
    assert r.connected and r.close == "RST" and r.response_len == 0
    assert r.close_after_s is not None and r.close_after_s < 1.5


async def test_close_with_unread_bytes_is_rst_like_frolov_says():
    with server(close_with_unread) as (port, _):
        r = await observe("127.0.0.1", port, HELLO, watch_s=2)
    assert r.close == "RST"


async def test_silent_server_times_out():
    with server(silent) as (port, _):
        t0 = time.monotonic()
        r = await observe("127.0.0.1", port, HELLO, watch_s=0.5)
        took = time.monotonic() - t0
    assert r.connected and r.close == "TIMEOUT" and r.close_after_s is None
    assert r.response_len == 0 and 0.45 <= took < 1.5


async def test_fin_time_is_measured_from_connect():
    with server(fin_after(0.4)) as (port, _):
        r = await observe("127.0.0.1", port, Probe("empty", b""), watch_s=2)
    assert r.close == "FIN" and 0.35 <= r.close_after_s < 0.9 and r.sent == 0


async def test_refused_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    r = await observe("127.0.0.1", port, HELLO, watch_s=0.5)
    assert not r.connected and r.close == "REFUSED" and "ECONNREFUSED" in r.error


async def test_unresolvable_host_is_an_error_not_a_crash():
    r = await observe("no-such-host.invalid", 80, HELLO, watch_s=0.5)
    assert not r.connected and r.close == "ERROR" and "resolve" in r.error


async def test_sock_factory_makes_the_socket():
    made: list[int] = []

    def factory(family: int) -> socket.socket:
        made.append(family)
        return socket.socket(family, socket.SOCK_STREAM)

    with server(reply_then_fin) as (port, _):
        r = await observe("127.0.0.1", port, HELLO, watch_s=2, sock_factory=factory)
    assert made == [socket.AF_INET] and r.close == "FIN"


async def test_run_suite_is_bounded_and_keeps_order():
    probes = frolov_suite()
    with server(fin_after(0.3)) as (port, stats):
        t0 = time.monotonic()
        results = await run_suite("127.0.0.1", port, probes, watch_s=3, concurrency=4)
        took = time.monotonic() - t0
    assert [r.probe for r in results] == [p.name for p in probes]
    assert all(r.close == "FIN" for r in results)
    assert [r.sent for r in results] == [len(p.payload) for p in probes]
    assert stats["max_active"] <= 4
    assert took < 3  # 13 probes in batches of 4, ~0.3 s each


def test_cli_json_lines_and_verdict(capsys):
    with server(reply_then_fin) as (port, _):
        rc = main(["127.0.0.1", str(port), "--watch", "0.5", "--sizes", "23,51", "--json"])
    lines = [json.loads(ln) for ln in capsys.readouterr().out.splitlines()]
    assert rc == 0 and len(lines) == 7 + 2 + 1
    assert lines[0]["probe"] == "http" and lines[0]["close"] == "FIN"
    assert bytes.fromhex(lines[0]["response"]).startswith(b"HTTP/1.0 400")
    assert lines[-1]["verdict"] == "responds-with-data"


def test_cli_bad_args_are_one_line(capsys):
    for argv in (["h", "70000"], ["127.0.0.1", "80", "--watch", "-1"], ["127.0.0.1"],
                 ["127.0.0.1", "80", "--sizes", "5,5"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        err = capsys.readouterr().err
        assert exc.value.code == 2 and err.count("\n") == 1 and err.startswith("prober: ")
    assert main(["no-such-host.invalid", "80"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot resolve" in err
