"""Managed mode end to end: ptadapter and Debian tor as the parent of our PT."""

import asyncio
import contextlib
import os
import queue
import random
import re
import shutil
import signal
import socket
import string
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from ptadapter import ClientAdapter, ExtServerAdapter, ServerAdapter

from netns import procstat
from tests.support.echo import echo, start_echo_server
from transports import base
from transports.obfs4.statefile import load_or_create
from transports.pt import managed, socks5
from transports.pt.environment import ClientConfig, ServerConfig

PT = [sys.executable, "-m", "transports.pt"]


def port_of(server: asyncio.Server) -> int:
    return server.sockets[0].getsockname()[1]


async def exchange(r, w, payload: bytes) -> bytes:
    """Send `payload` then EOF while reading everything back."""
    async def send():
        w.write(payload)
        await w.drain()
        w.write_eof()

    sender = asyncio.create_task(send())
    got = await asyncio.wait_for(r.read(-1), 20)
    await sender
    w.close()
    return got


async def test_ptadapter_client_and_server_move_1mb_both_ways(tmp_path):
    echo, _ = await start_echo_server()
    server = ServerAdapter(PT, tmp_path / "server", "127.0.0.1", port_of(echo))
    server.add_transport("direct", "127.0.0.1", 0)
    client = ClientAdapter(PT, tmp_path / "client", ["direct"])
    async with echo, server, client:
        bridge = server.get_transport("direct")
        assert bridge.options is None  # `direct` publishes no ARGS
        r, w = await client.open_transport_connection(
            "direct", bridge.host, bridge.port, {"note": "a;b=c\\d", "pad": "x" * 300})
        payload = os.urandom(1 << 20)
        assert await exchange(r, w, payload) == payload  # 1 MB up, the same 1 MB down


async def test_extended_orport_via_ptadapter(tmp_path):
    seen: asyncio.Queue = asyncio.Queue()

    async def on_connection(r, w, info):
        await seen.put(info)
        await echo(r, w)

    ext = ExtServerAdapter(PT, tmp_path / "server", on_connection)
    ext.add_transport("direct", "127.0.0.1", 0)
    async with ext:
        bridge = ext.get_transport("direct")
        r, w = await asyncio.open_connection(bridge.host, bridge.port)
        our_port = w.get_extra_info("sockname")[1]
        assert await exchange(r, w, b"through the Extended ORPort") == \
            b"through the Extended ORPort"
        info = await asyncio.wait_for(seen.get(), 5)
    assert info.transport == "direct"  # TRANSPORT
    assert (str(info.host), info.port) == ("127.0.0.1", our_port)  # USERADDR: the real peer


# Our PT as a plain subprocess, for the cases ptadapter cannot stage.

async def spawn_pt(tmp_path: Path, **env: str):
    full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "TOR_PT_MANAGED_TRANSPORT_VER": "1",
            "TOR_PT_STATE_LOCATION": str(tmp_path / "state"),
            "TOR_PT_EXIT_ON_STDIN_CLOSE": "1", **env}
    proc = await asyncio.create_subprocess_exec(*PT, env=full, stdin=asyncio.subprocess.PIPE,
                                                stdout=asyncio.subprocess.PIPE)
    lines = []
    while line := (await asyncio.wait_for(proc.stdout.readline(), 10)).decode():
        lines.append(line.rstrip("\n"))
        if lines[-1].endswith("METHODS DONE"):
            break
    return proc, lines


@pytest.fixture
async def procs():
    started: list[asyncio.subprocess.Process] = []
    yield started
    for p in started:
        if p.returncode is None:
            p.kill()
            await p.wait()


def method_port(lines: list[str], keyword: str, name: str) -> int:
    for line in lines:
        m = re.match(rf"{keyword} {name} (?:socks5 )?127\.0\.0\.1:(\d+)", line)
        if m:
            return int(m[1])
    raise AssertionError(f"no {keyword} {name} in {lines}")


async def test_bad_cookie_pt_logs_and_closes(tmp_path, procs):
    """Tor holds another cookie: the PT must hang up on the client and LOG why."""
    (tmp_path / "cookie").write_bytes(b"! Extended ORPort Auth Cookie !\n" + os.urandom(32))
    hung_up = asyncio.Event()

    async def impostor(r, w):  # speaks SafeCookie but cannot know our cookie
        w.write(b"\x01\x00")
        await r.readexactly(33)
        w.write(os.urandom(64))
        await r.read()  # the PT must close without sending its hash
        hung_up.set()
        w.close()

    ext = await asyncio.start_server(impostor, "127.0.0.1", 0)
    async with ext:
        proc, lines = await spawn_pt(
            tmp_path, TOR_PT_SERVER_TRANSPORTS="direct",
            TOR_PT_SERVER_BINDADDR="direct-127.0.0.1:0",
            TOR_PT_EXTENDED_SERVER_PORT=f"127.0.0.1:{port_of(ext)}",
            TOR_PT_AUTH_COOKIE_FILE=str(tmp_path / "cookie"))
        procs.append(proc)
        r, w = await asyncio.open_connection("127.0.0.1", method_port(lines, "SMETHOD", "direct"))
        w.write(b"hello")
        assert await asyncio.wait_for(r.read(), 5) == b""  # closed on us
        w.close()
        await asyncio.wait_for(hung_up.wait(), 5)
        log = (await asyncio.wait_for(proc.stdout.readline(), 5)).decode()
    assert log.startswith("LOG SEVERITY=error") and "server hash mismatch" in log
    proc.stdin.close()
    assert await asyncio.wait_for(proc.wait(), 5) == 0


async def test_exits_within_2s_of_stdin_closing(tmp_path, procs):
    proc, lines = await spawn_pt(tmp_path, TOR_PT_CLIENT_TRANSPORTS="direct")
    procs.append(proc)
    assert lines[-1] == "CMETHODS DONE"
    proc.stdin.close()
    t0 = time.monotonic()
    assert await asyncio.wait_for(proc.wait(), 2) == 0
    assert time.monotonic() - t0 < 2


async def test_sigterm_exits(tmp_path, procs):
    proc, _ = await spawn_pt(tmp_path, TOR_PT_CLIENT_TRANSPORTS="direct")
    procs.append(proc)
    proc.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(proc.wait(), 2) == 0


async def test_sigint_drains_then_second_sigint_exits(tmp_path, procs):
    echo, _ = await start_echo_server()
    async with echo:
        proc, lines = await spawn_pt(tmp_path, TOR_PT_SERVER_TRANSPORTS="direct",
                                     TOR_PT_SERVER_BINDADDR="direct-127.0.0.1:0",
                                     TOR_PT_ORPORT=f"127.0.0.1:{port_of(echo)}")
        procs.append(proc)
        port = method_port(lines, "SMETHOD", "direct")
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"1")
        assert await r.readexactly(1) == b"1"
        proc.send_signal(signal.SIGINT)
        await asyncio.sleep(0.3)
        with pytest.raises(OSError):  # listener closed: no new connections
            await asyncio.open_connection("127.0.0.1", port)
        w.write(b"2")  # ...but the open one still works
        assert await r.readexactly(1) == b"2"
        assert proc.returncode is None
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 2) == 0
        w.close()


async def test_sigint_exits_once_connections_finish(tmp_path, procs):
    echo, _ = await start_echo_server()
    async with echo:
        proc, lines = await spawn_pt(tmp_path, TOR_PT_SERVER_TRANSPORTS="direct",
                                     TOR_PT_SERVER_BINDADDR="direct-127.0.0.1:0",
                                     TOR_PT_ORPORT=f"127.0.0.1:{port_of(echo)}")
        procs.append(proc)
        r, w = await asyncio.open_connection("127.0.0.1", method_port(lines, "SMETHOD", "direct"))
        w.write(b"x")
        await r.readexactly(1)
        proc.send_signal(signal.SIGINT)
        await asyncio.sleep(0.2)
        assert proc.returncode is None
        assert await exchange(r, w, b"last words") == b"last words"
        assert await asyncio.wait_for(proc.wait(), 3) == 0


async def test_dial_failure_is_a_socks_reply_and_a_scrubbed_log(tmp_path, procs):
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    dead_port = closed.getsockname()[1]
    closed.close()  # nothing listens there now
    proc, lines = await spawn_pt(tmp_path, TOR_PT_CLIENT_TRANSPORTS="direct")
    procs.append(proc)
    r, w = await asyncio.open_connection("127.0.0.1", method_port(lines, "CMETHOD", "direct"))
    with pytest.raises(socks5.SocksError) as e:
        await socks5.client_connect(r, w, "127.0.0.1", dead_port, {"k": "v"})
    assert e.value.reply == socks5.REP_REFUSED
    w.close()
    log = (await asyncio.wait_for(proc.stdout.readline(), 5)).decode()
    assert log.startswith("LOG SEVERITY=warning") and "Connection refused" in log
    assert str(dead_port) not in log  # bridge addresses stay out of tor's log


# In-process: transports with odd shapes, registered only for the test.

class _ServerWithArgs:
    def smethod_args(self):
        return {"cert": "AbC/+=", "iat-mode": "0"}

    async def wrap(self, reader, writer):
        return reader, writer


class _ServerOnly(base.Transport):
    roles = frozenset({"server"})

    def server_factory(self, state_dir, args):
        if args.get("fail"):
            raise base.TransportError("bad option fail")
        return _ServerWithArgs()


async def test_smethod_args_and_method_errors(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(base._registry, "argsy", _ServerOnly("argsy"))
    monkeypatch.setitem(base._registry, "failing", _ServerOnly("failing"))
    life = managed.Lifetime()
    cfg = ServerConfig(version="1", state_location=tmp_path, transports=["argsy", "failing"],
                       bindaddrs={"argsy": ("127.0.0.1", 0)},
                       options={"failing": {"fail": "1"}}, orport=("127.0.0.1", 9))
    servers = await managed.start_server(cfg, life)
    for s in servers:
        s.close()
    client = ClientConfig(version="1", state_location=tmp_path, transports=["argsy"])
    assert await managed.start_client(client, life) == []
    out = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"SMETHOD argsy 127\.0\.0\.1:\d+ ARGS:cert=AbC/\+\\=,iat-mode=0", out[0])
    assert out[1] == "SMETHOD-ERROR failing bad option fail"
    assert out[2:] == ["SMETHODS DONE", "CMETHOD-ERROR argsy client not supported",
                       "CMETHODS DONE"]


async def _http_upstream(body: bytes) -> asyncio.Server:
    """Answers each GET with ``body``; closes right after the answer to ``Connection: close``
    (as the lab's web server does), else waits for the next request or EOF."""
    async def handle(r, w):
        try:
            while True:
                head = await r.readuntil(b"\r\n\r\n")
                w.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
                await w.drain()
                if b"connection: close" in head.lower():
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            w.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


async def _obfs4_server(tmp_path: Path, up: asyncio.Server):
    """Our managed-mode obfs4 server relaying to `up`: its Lifetime, its listeners,
    and a client dial that trusts it."""
    state = load_or_create(tmp_path)
    life = managed.Lifetime()
    cfg = ServerConfig(version="1", state_location=tmp_path, transports=["obfs4"],
                       bindaddrs={"obfs4": ("127.0.0.1", 0)}, orport=("127.0.0.1", port_of(up)))
    servers = await managed.start_server(cfg, life)
    dial = base.get("obfs4").client_factory(None, {"cert": state.cert, "iat-mode": "0"}).dial
    return life, servers, dial


async def test_obfs4_handlers_end_with_their_connections(tmp_path):
    """Each obfs4 connection's handler ends once the connection is over, whichever
    side ends it: it used to wait forever on the handshake's StreamWriter, whose
    protocol the obfs4 session had replaced (every task alive at shutdown). And a
    response the upstream sends right before closing arrives whole."""
    body = os.urandom(200_000)
    up = await _http_upstream(body)
    life, servers, dial = await _obfs4_server(tmp_path, up)
    get = b"GET /bulk HTTP/1.1\r\nHost: web.lab\r\nConnection: %s\r\n\r\n"
    try:
        for last_close in (b"close", b"keep-alive"):  # the upstream ends it, or the client
            r, w = await dial("127.0.0.1", port_of(servers[0]))
            for conn in (b"keep-alive", last_close):
                w.write(get % conn)
                await r.readuntil(b"\r\n\r\n")
                assert await asyncio.wait_for(r.readexactly(len(body)), 5) == body
            w.close()
            await w.wait_closed()
            await asyncio.wait_for(life._idle.wait(), 2)  # no handler left behind
            assert not life._tasks
    finally:
        for s in (*servers, up):
            s.close()


async def test_obfs4_session_ended_by_bad_frames_is_logged(tmp_path, capsys):
    """A session that ends on a frame failing authentication looks like an EOF to
    the relay: the server says so in a LOG line (no addresses), for the cell logs."""
    up, _ = await start_echo_server()
    life, servers, dial = await _obfs4_server(tmp_path, up)
    try:
        r, w = await dial("127.0.0.1", port_of(servers[0]))
        w.write(b"ping")
        assert await asyncio.wait_for(r.readexactly(4), 5) == b"ping"
        w.transport.get_extra_info("obfs4").raw.write(bytes(3000))  # not a frame
        with contextlib.suppress(ConnectionError):
            assert await asyncio.wait_for(r.read(), 5) == b""
        w.close()
        await asyncio.wait_for(life._idle.wait(), 2)
        logs = [line for line in capsys.readouterr().out.splitlines()
                if line.startswith("LOG ")]
        assert len(logs) == 1, logs
        assert logs[0].startswith("LOG SEVERITY=warning")
        assert "obfs4: session ended on a framing error: " in logs[0]
        assert "127.0.0.1" not in logs[0]
    finally:
        for s in (*servers, up):
            s.close()


async def test_shutdown_cancels_handlers_quietly_but_reports_errors():
    """Cancelling a tracked handler logs nothing (Python 3.11 logs "Exception in
    callback ... CancelledError" for a cancelled client_connected_cb); a handler
    that fails is still reported."""
    loop = asyncio.get_running_loop()
    reported: list[dict] = []
    loop.set_exception_handler(lambda _loop, ctx: reported.append(ctx))
    life = managed.Lifetime()
    entered = asyncio.Event()

    async def handler(r, w):
        entered.set()
        if await r.read(1) == b"!":
            raise RuntimeError("a real bug")
        await asyncio.Event().wait()  # until cancelled

    server = await asyncio.start_server(life.track(handler), "127.0.0.1", 0)
    try:
        _, w1 = await asyncio.open_connection("127.0.0.1", port_of(server))
        _, w2 = await asyncio.open_connection("127.0.0.1", port_of(server))
        w1.write(b"!")
        w2.write(b".")
        await asyncio.wait_for(entered.wait(), 2)
        for _ in range(50):
            if len(life._tasks) == 1 and reported:
                break
            await asyncio.sleep(0.02)
        life.now.set()
        await asyncio.wait_for(life.wait([server]), 3)
        await asyncio.sleep(0.05)  # the done callbacks run
        assert not life._tasks
        assert [str(ctx.get("exception")) for ctx in reported] == ["a real bug"]
        w1.close()
        w2.close()
    finally:
        loop.set_exception_handler(None)
        server.close()


# Debian tor as the parent, inside a loopback-only network namespace.

def _reader(stream, q: queue.Queue) -> None:
    for line in stream:
        q.put(line)
    q.put(None)


@pytest.mark.interop
def test_debian_tor_launches_our_pt(tmp_path):
    tor, ip = shutil.which("tor"), shutil.which("ip")
    if not tor or not ip:
        pytest.skip("needs Debian tor and iproute2")
    if os.geteuid() != 0:
        pytest.skip("needs root for a network namespace")
    # tor starts managed PTs only with DisableNetwork 0, so it runs where only lo exists.
    ns = "ptlt" + "".join(random.choices(string.ascii_lowercase + string.digits, k=3)) + "-tor"
    torrc = tmp_path / "torrc"
    torrc.write_text(
        f"DataDirectory {tmp_path / 'data'}\n"
        "UseBridges 1\n"
        "Bridge direct 127.0.0.1:9\n"
        # `ptlab pt`, the console script, as a user's torrc would name it.
        f"ClientTransportPlugin direct,obfs4 exec {Path(sys.executable).parent / 'ptlab'} pt\n"
        "SocksPort 0\nSandbox 0\nDisableNetwork 0\nLog info stdout\n")
    subprocess.run([ip, "netns", "add", ns], check=True)
    proc = reader = None
    want = {"registered": "Successfully registered transport direct",
            "obfs4": "Successfully registered transport obfs4",
            "cmethod": "(CMETHOD direct socks5 127.0.0.1:",
            "connected": "conn_done_pt"}
    seen: dict[str, str] = {}
    pt_pid = None
    try:
        subprocess.run([ip, "-n", ns, "link", "set", "lo", "up"], check=True)
        proc = subprocess.Popen([ip, "netns", "exec", ns, tor, "-f", str(torrc)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        q: queue.Queue = queue.Queue()
        reader = threading.Thread(target=_reader, args=(proc.stdout, q), daemon=True)
        reader.start()
        deadline = time.monotonic() + 30
        while len(seen) < len(want) and time.monotonic() < deadline:
            try:
                line = q.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            if m := re.search(r"has spawned with PID '(\d+)'", line):
                pt_pid = int(m[1])
            seen.update({k: line for k, s in want.items() if s in line})
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if reader is not None:
                reader.join(5)  # EOF after tor exits; then the pipe can be closed
            proc.stdout.close()
        subprocess.run([ip, "netns", "del", ns], check=False)
    assert set(seen) == set(want), f"tor log lacked {set(want) - set(seen)}"
    # tor closed our stdin when it exited; the PT must be gone (or a zombie) soon after.
    assert pt_pid is not None
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _alive(pt_pid):
        time.sleep(0.1)
    assert not _alive(pt_pid)


def _alive(pid: int) -> bool:
    return procstat.alive(pid)


async def test_a_client_only_transport_has_no_server_method(tmp_path, capsys):
    # Conjure's server side is the station; the PT layer must not offer one.
    # (Before roles were declared, Conjure's raising server_factory counted as a server.)
    assert base.get("conjure").roles == {"client"}
    life = managed.Lifetime()
    cfg = ServerConfig(version="1", state_location=tmp_path, transports=["conjure"],
                       orport=("127.0.0.1", 9))
    assert await managed.start_server(cfg, life) == []
    assert capsys.readouterr().out.splitlines() == [
        "SMETHOD-ERROR conjure server not supported", "SMETHODS DONE"]
