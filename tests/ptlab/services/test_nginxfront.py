"""Debian's nginx with our WebTunnel server behind its secret path, against the same
nginx with nothing behind it (issue 25): a prober that does not know the path gets
the same answers byte for byte, the path itself upgrades, and bad requests on it
get nginx's own errors while the server carries on."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from censor_sim.prober import https
from ptlab.processes.extlaunch import port_open
from ptlab.services.ca import LabCA
from ptlab.services.nginxfront import Front, secret_path
from tests.support.echo import echo
from tests.support.strategies import mostly
from transports.webtunnel.args import ClientArgs
from transports.webtunnel.client import WebTunnelClientFactory
from transports.webtunnel.server import ServerConfig, WebTunnelServer, listen

pytestmark = pytest.mark.skipif(shutil.which("nginx") is None,
                                reason="nginx is not installed (scripts/setup installs it)")

NAME = "bridge.lab"
SECRET = secret_path(25)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Backend:
    """Our WebTunnel server on its own event loop in a thread, echoing every tunnel
    and remembering the forwarded client addresses."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.addresses: list[str] = []
        self.errors: list[dict] = []  # anything that reached the loop's exception handler
        self.loop.set_exception_handler(lambda _loop, context: self.errors.append(context))
        self.server = WebTunnelServer(ServerConfig(f"https://{NAME}/{SECRET}"), self._tunnel)
        self.port = 0
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        assert ready.wait(10)

    async def _tunnel(self, inner, client_addr: str) -> None:
        self.addresses.append(client_addr)
        await echo(*inner)

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        listening = self.loop.run_until_complete(listen(self.server, "127.0.0.1", 0))
        self.port = listening.port
        ready.set()
        self.loop.run_forever()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def run_nginx(front: Front) -> subprocess.Popen:
    proc = subprocess.Popen(front.argv(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    host, _, port = front.listen[0].rpartition(":")
    deadline = time.monotonic() + 10
    while not port_open(host, int(port)):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"nginx did not start: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.05)
    return proc


class Fronts:
    def __init__(self, root: Path) -> None:
        self.ca = LabCA.load_or_create(root / "ca")
        cert, key = self.ca.issue([NAME], ["127.0.0.1"], "bridge")
        self.backend = Backend()
        self.tunnel = Front(root / "tunnel", (f"127.0.0.1:{free_port()}",), NAME, cert, key,
                            SECRET, self.backend.port).write()
        self.plain = Front(root / "plain", (f"127.0.0.1:{free_port()}",), NAME, cert,
                           key).write()
        # The same site: the same files with the same times (nginx's ETag and
        # Last-Modified come from them).
        for front in (self.tunnel, self.plain):
            for page in front.site.iterdir():
                os.utime(page, (1_700_000_000, 1_700_000_000))
        self.procs = [run_nginx(self.tunnel), run_nginx(self.plain)]

    @staticmethod
    def port(front: Front) -> int:
        return int(front.listen[0].rpartition(":")[2])

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
            p.wait(10)
        self.backend.stop()


@pytest.fixture(scope="module")
def fronts(tmp_path_factory) -> Iterator[Fronts]:
    f = Fronts(tmp_path_factory.mktemp("nginxfront"))
    try:
        yield f
    finally:
        f.stop()


def answers(front: Front, probes: list[https.HttpsProbe]) -> list[https.HttpsAnswer]:
    async def go() -> list[https.HttpsAnswer]:
        return [await https.ask("127.0.0.1", Fronts.port(front), NAME, p, 5.0) for p in probes]
    return asyncio.run(go())


def test_a_prober_without_the_secret_sees_the_same_nginx_byte_for_byte(fronts):
    probes = [p for seed in range(5) for p in https.suite(seed)]
    probes += [https.HttpsProbe("page", "/about.html"), https.HttpsProbe("css", "/style.css"),
               https.HttpsProbe("prefix", f"/{SECRET[:-1]}"),
               https.HttpsProbe("suffix", f"/{SECRET}x"),
               https.HttpsProbe("subpath", f"/{SECRET}/"),
               https.HttpsProbe("case", f"/{SECRET.swapcase()}", (
                   ("Connection", "Upgrade"), ("Upgrade", "websocket")))]
    tunnel, plain = answers(fronts.tunnel, probes), answers(fronts.plain, probes)
    for t, p in zip(tunnel, plain, strict=True):
        assert t.error is None and p.error is None, (t.probe, t.error, p.error)
        assert t.comparable() == p.comparable(), t.probe
    # Not vacuous: the site's pages and nginx's own 404s both came back.
    assert {a.status for a in tunnel} == {200, 404}
    assert https.classify(tunnel) == https.classify(plain) == https.WEB_SERVER
    assert not fronts.backend.addresses  # nothing reached the tunnel server


def test_the_secret_path_upgrades_through_nginx_with_the_forwarded_address(fronts):
    port = Fronts.port(fronts.tunnel)
    args = ClientArgs.parse({"url": f"https://{NAME}:{port}/{SECRET}",
                             "addr": f"127.0.0.1:{port}"})
    factory = WebTunnelClientFactory(args, cafile=str(fronts.ca.ca_path))
    data = os.urandom(300_000)

    async def go() -> bytes:
        reader, writer = await factory.dial("192.0.2.1", 443)
        writer.write(data)
        got = await asyncio.wait_for(reader.readexactly(len(data)), 20)
        writer.close()
        return got

    assert asyncio.run(go()) == data
    # From X-Forwarded-For, with the port Tor's server reports for it.
    assert fronts.backend.addresses[-1] == "127.0.0.1:60000"


def raw_request(port: int, request: bytes,
                complete: Callable[[bytes], bool] = lambda _out: False) -> bytes:
    """One TLS connection to nginx, ``request`` sent, everything it answers until it
    closes, two seconds pass, or what came so far is ``complete``."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            ctx.wrap_socket(raw, server_hostname=NAME) as tls:
        tls.sendall(request)
        tls.settimeout(2)
        out = b""
        try:
            while not complete(out) and (chunk := tls.recv(65536)):
                out += chunk
        except (TimeoutError, ssl.SSLError, ConnectionError):
            pass
        return out


TOKEN = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126,
                                       exclude_characters=":"), min_size=1, max_size=12)
# Values near the upgrade (so some requests reach our server's 101) or random bytes.
VALUE = st.sampled_from([b"upgrade", b"Upgrade", b"websocket", b"keep-alive, Upgrade", b"0",
                         b"chunked", b"203.0.113.9"]) | st.binary(max_size=40).map(
    lambda b: b.replace(b"\r", b"").replace(b"\n", b""))
HEADER = st.tuples(st.sampled_from(["Connection", "Upgrade", "Host", "Content-Length",
                                    "Transfer-Encoding", "X-Forwarded-For"]) | TOKEN, VALUE)


# The fields an upgrade needs, most often present: Host (HTTP/1.1 without it is
# nginx's 400), Connection and Upgrade (nginx passes Upgrade on).
HOST = ("Host", NAME.encode())
UPGRADE_FIELDS = st.sampled_from([[HOST, ("Connection", b"Upgrade"), ("Upgrade", b"websocket")],
                                  [HOST, ("Upgrade", b"websocket")], [HOST], []])


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(method=mostly([b"GET", b"POST", b"HEAD", b"CONNECT"],
                     st.sampled_from([b"G\x00T", b"get"]) | st.binary(min_size=1, max_size=8)),
       version=mostly([b"HTTP/1.1", b"HTTP/1.0"],
                      st.sampled_from([b"HTTP/2.0", b"HTTP/1.1x", b"HTTP/0.9", b""])),
       before=st.lists(HEADER, max_size=3), core=UPGRADE_FIELDS,
       after=st.lists(HEADER, max_size=3), body=st.binary(max_size=64))
def test_bad_requests_on_the_secret_path_get_nginxs_own_errors(fronts, method, version, before,
                                                              core, after, body):
    headers = before + core + after
    head = method + b" /" + SECRET.encode() + (b" " + version if version else b"") + b"\r\n"
    head += b"".join(k.encode() + b": " + v + b"\r\n" for k, v in headers)
    upgraded = b"HTTP/1.1 101 Switching Protocols\r\n"

    def echoed(out: bytes) -> bool:  # a tunnel stays open: stop once the body came back
        return out.startswith(upgraded) and out.endswith(b"\r\n\r\n" + body)

    answer = raw_request(Fronts.port(fronts.tunnel), head + b"\r\n" + body, echoed)
    event(answer.split(b"\r\n", 1)[0][:30].decode("latin-1") if answer else "silence")
    if answer.startswith(upgraded):
        # A request that really was an upgrade: nginx passed our server's exact 101,
        # and the bytes after the head came back through the tunnel.
        assert b"\r\nUpgrade: websocket\r\n" in answer
        assert echoed(answer), answer[-200:]
    elif answer.startswith(b"<html>"):
        # An HTTP/0.9 request (no version) gets nginx's error page with no head.
        assert b"<center>nginx/" in answer, answer[:300]
    elif answer:
        # Everything else is nginx refusing: its error status, its Server field.
        status = answer.split(b"\r\n", 1)[0]
        assert status.startswith((b"HTTP/1.1 ", b"HTTP/1.0 ")), answer[:200]
        assert int(status.split()[1]) >= 400, answer[:200]
        assert b"\r\nServer: nginx" in answer, answer[:300]
    else:
        # Silence only while nginx waits for a body the request announced.
        names = {k.lower() for k, _ in headers}
        assert names & {"content-length", "transfer-encoding"}, head
    # Nothing escaped the server's handlers, and none hit its unexpected-error path.
    assert fronts.backend.thread.is_alive() and not fronts.backend.errors
    assert fronts.backend.server.stats.unexpected == 0


# --- TLS and HTTP/2 as deployed bridges offer them (docs/lab/peers.md §3.3) --------------

#: ClientHellos a prober might send: (lowest version, highest version, ALPN offered).
HELLOS: dict[str, tuple[ssl.TLSVersion, ssl.TLSVersion, list[str] | None]] = {
    "tls1.3 only": (ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_3, None),
    "tls1.2 only": (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_2, None),
    "tls1.1 only": (ssl.TLSVersion.TLSv1_1, ssl.TLSVersion.TLSv1_1, None),
    "alpn h2": (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3, ["h2"]),
    "alpn h2 on tls1.2": (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_2, ["h2"]),
    "alpn http/1.1": (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3, ["http/1.1"]),
    "alpn h2 and http/1.1": (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3,
                             ["h2", "http/1.1"]),
    "alpn unknown": (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3, ["spdy/3.1"]),
    "no alpn": (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3, None),
}


def handshake(port: int, hello: str) -> tuple[str, ...]:
    """What nginx made of one ClientHello: (version, cipher, ALPN), or ("alert", why)."""
    low, high, alpn = HELLOS[hello]
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")  # so that TLS 1.1 can be offered at all
    ctx.minimum_version, ctx.maximum_version = low, high
    if alpn:
        ctx.set_alpn_protocols(alpn)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        try:
            with ctx.wrap_socket(raw, server_hostname=NAME) as tls:
                cipher = tls.cipher()
                return (str(tls.version()), cipher[0] if cipher else "",
                        str(tls.selected_alpn_protocol()))
        except ssl.SSLError as exc:
            return ("alert", exc.reason or str(exc))


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated:DeprecationWarning")
def test_every_hello_gets_the_same_handshake_from_the_bridge_as_from_the_site(fronts):
    """TLS versions, ALPN: the bridge's nginx and the same nginx serving only the
    site answer every ClientHello alike, served or refused."""
    seen = {}
    for hello in HELLOS:
        tunnel = handshake(Fronts.port(fronts.tunnel), hello)
        plain = handshake(Fronts.port(fronts.plain), hello)
        assert tunnel == plain, (hello, tunnel, plain)
        seen[hello] = tunnel
    # Not vacuous: what certbot's options and `listen ... http2` offer, and refuse.
    assert seen["tls1.3 only"][0] == "TLSv1.3" and seen["tls1.2 only"][0] == "TLSv1.2"
    assert seen["no alpn"][0] == "TLSv1.3"  # 1.3 when the client offers it
    assert seen["tls1.1 only"][0] == "alert"
    assert seen["alpn h2"][2] == "h2" and seen["alpn h2 and http/1.1"][2] == "h2"
    assert seen["alpn h2 on tls1.2"][:3:2] == ("TLSv1.2", "h2")
    assert seen["alpn http/1.1"][2] == "http/1.1"
    assert seen["alpn unknown"][0] == "alert"  # nginx refuses an ALPN it does not know


def curl(port: int, path: str, *flags: str) -> subprocess.CompletedProcess[bytes]:
    """One request by curl (nghttp2 for HTTP/2): its head and body, then the HTTP
    version it used (``-w``)."""
    return subprocess.run(
        ["curl", "-sk", "-D", "-", "--resolve", f"{NAME}:{port}:127.0.0.1", *flags,
         "-w", "\\nhttp_version=%{http_version}", f"https://{NAME}:{port}{path}"],
        capture_output=True, timeout=10)


def comparable(answer: bytes) -> bytes:
    """An answer without its Date field, which differs by the second."""
    return b"\n".join(line for line in answer.split(b"\n")
                      if not line.lower().startswith(b"date:"))


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_a_tls13_only_hello_and_alpn_h2_are_served_and_alike_on_both(fronts):
    """A TLS 1.3-only client speaking HTTP/2 (ALPN h2 alone) gets the site, and the
    same answers from the bridge as from the plain site, page and 404 alike."""
    port, plain = Fronts.port(fronts.tunnel), Fronts.port(fronts.plain)
    tunnelled = len(fronts.backend.addresses)
    index = curl(port, "/", "--http2", "--tlsv1.3", "--tls-max", "1.3")
    assert index.returncode == 0, index.stderr
    assert index.stdout.startswith(b"HTTP/2 200"), index.stdout[:200]
    assert index.stdout.endswith(b"http_version=2")
    assert b"<title>Field notes</title>" in index.stdout
    for path in ("/", "/about.html", "/robots.txt", "/missing", f"/{SECRET[:-1]}",
                 f"/{SECRET}x"):
        for flags in (("--http2", "--tlsv1.3", "--tls-max", "1.3"),
                      ("--http2", "--tlsv1.2", "--tls-max", "1.2"), ("--http1.1",)):
            a, b = curl(port, path, *flags), curl(plain, path, *flags)
            assert a.returncode == b.returncode == 0, (path, flags, a.stderr)
            assert comparable(a.stdout) == comparable(b.stdout), (path, flags)
    assert len(fronts.backend.addresses) == tunnelled  # nothing reached the tunnel server
