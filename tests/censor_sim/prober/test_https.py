"""The HTTPS front suite on loopback: what it asks, how it reads answers, its verdicts.

Real nginx in front of our WebTunnel server is compared with a plain nginx in
tests/ptlab/services/test_nginxfront.py; here the servers are small stand-ins
for each verdict."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable

import pytest

from censor_sim.prober import https
from ptcommon.tlshello import parse_client_hello
from ptlab.services.ca import LabCA
from tests.support.tlsrecords import client_hello

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@pytest.fixture
def site(tmp_path) -> ssl.SSLContext:
    """A server context for site.example (the prober checks no certificate)."""
    cert, key = LabCA.load_or_create(tmp_path / "ca").issue(["site.example"], [], "site")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    return ctx


async def serve(handler: Handler, ctx: ssl.SSLContext | None) -> tuple[asyncio.Server, int]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0, ssl=ctx)
    return server, server.sockets[0].getsockname()[1]


async def web(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    path = head.split(b" ")[1]
    if path == b"/":
        body = b"<h1>hello</h1>"
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    else:
        writer.write(b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"4\r\nnope\r\n0\r\n\r\n")
    await writer.drain()  # and keep the connection open, as keep-alive does


async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read()  # a tunnel server waiting for its secret: no answer at all


async def closes(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    writer.close()


async def verdict(handler: Handler,
                  ctx: ssl.SSLContext | None) -> tuple[str, list[https.HttpsAnswer]]:
    server, port = await serve(handler, ctx)
    async with server:
        answers = await https.investigate("127.0.0.1", port, sni="site.example", watch_s=1.0)
    return https.classify(answers), answers


async def test_a_web_server_is_a_web_server_and_bodies_are_read_by_their_framing(site):
    label, answers = await verdict(web, site)
    assert label == https.WEB_SERVER
    assert [a.status for a in answers] == [200, 404, 404, 404]
    assert answers[0].body == b"<h1>hello</h1>" and answers[1].body == b"nope"
    # Kept-alive connections did not have to time out: framing ended each read.
    assert all(a.after_s < 0.9 for a in answers)


@pytest.mark.parametrize("handler", [silent, closes])
async def test_tls_with_no_http_behind_it_is_not_a_web_server(handler, site):
    label, answers = await verdict(handler, site)
    assert label == https.NOT_WEB
    assert all(a.tls and a.status is None and a.error for a in answers)


async def test_a_server_that_speaks_no_tls_and_a_closed_port(site):
    label, _ = await verdict(silent, None)
    assert label == https.NO_TLS
    server, port = await serve(silent, site)
    server.close()
    await server.wait_closed()
    answers = await https.investigate("127.0.0.1", port, watch_s=0.5)
    assert https.classify(answers) == https.UNREACHABLE


async def test_a_non_http_answer_is_not_a_web_server(site):
    async def ssh(reader, writer):
        writer.write(b"SSH-2.0-OpenSSH_9.2\r\n\r\n")
        await writer.drain()
    label, answers = await verdict(ssh, site)
    assert label == https.NOT_WEB
    assert answers[0].error == "not an HTTP status line"


def test_the_suite_asks_what_a_browser_would_on_paths_it_guesses():
    probes = https.suite(seed=4)
    assert [p.name for p in probes] == ["root", "guess-1", "guess-2", "upgrade-guess"]
    assert probes[0].path == "/" and len({p.path for p in probes}) == 4
    upgrade = probes[-1].request("site.example")
    assert b"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" in upgrade
    assert upgrade.startswith(f"GET {probes[-1].path} HTTP/1.1\r\nHost: site.example\r\n"
                              .encode())
    assert https.suite(seed=4) == probes and https.suite(seed=5) != probes


async def test_the_probe_sends_the_sni_of_the_suspicious_flow(site):
    seen: list[str | None] = []
    site.sni_callback = lambda sock, name, _ctx: seen.append(name)
    server, port = await serve(web, site)
    # The first payload the censor recorded: a ClientHello naming bridge.example.
    first = client_hello("bridge.example")
    assert parse_client_hello(first).sni == "bridge.example"
    async with server:
        await https.investigate("127.0.0.1", port, first, watch_s=1.0)
    assert seen and set(seen) == {"bridge.example"}


async def test_a_hello_split_over_segments_gives_no_name_and_the_censors_name_wins(site):
    """A long ClientHello (post-quantum key shares) spans two segments: the first
    payload alone holds no complete hello. The probes then use the name the censor's
    detector read from the whole hello, and never fail on the fragment."""
    seen: list[str | None] = []
    site.sni_callback = lambda sock, name, _ctx: seen.append(name)
    server, port = await serve(web, site)
    fragment = client_hello("bridge.example")[:60]
    assert https.sni_of(fragment) is None
    assert https.sni_of(b"\x16\x03\x01\xff\xff" + bytes(40)) is None
    async with server:
        answers = await https.investigate("127.0.0.1", port, fragment, sni="bridge.example",
                                          watch_s=1.0)
    assert https.classify(answers) == https.WEB_SERVER
    assert seen and set(seen) == {"bridge.example"}
