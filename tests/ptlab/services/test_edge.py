"""The CDN edge over real loopback TLS: routing by Host, fronting, headers, streaming."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import re
import socket
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from ptcommon.events import EventLog
from ptlab.services import edge
from ptlab.services.ca import LabCA
from ptlab.services.main import ConfigError
from ptlab.services.payload import expected_sha256, payload_chunks
from ptlab.services.web import create_app, start_sites

REPO = Path(__file__).resolve().parents[3]
GATE = web.AppKey("gate", asyncio.Event)


class Origin:
    """An aiohttp app on an ephemeral loopback port."""

    def __init__(self, app: web.Application) -> None:
        self.runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        self.url = ""

    async def start(self) -> Origin:
        await self.runner.setup()
        (addr,) = await start_sites(self.runner, [("127.0.0.1", 0)], None)
        self.url = f"http://{addr}"
        return self

    async def close(self) -> None:
        await self.runner.cleanup()


def _free_port() -> int:
    """A loopback port that nothing listens on (for the 502 case)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Lab:
    tls: str
    http: str
    ctx: Any
    alpha: Origin
    beta: Origin
    stream: io.StringIO

    def events(self, event: str) -> list[dict[str, Any]]:
        recs = [json.loads(line) for line in self.stream.getvalue().splitlines()]
        return [r for r in recs if r["event"] == event]


async def _drip(request: web.Request) -> web.StreamResponse:
    """Send one chunk, wait until the test says so, send another (long-poll shape)."""
    resp = web.StreamResponse()
    await resp.prepare(request)
    await resp.write(b"first|")
    await request.app[GATE].wait()
    await resp.write(b"second")
    return resp


async def _truncating_origin(reader: asyncio.StreamReader,
                            writer: asyncio.StreamWriter) -> None:
    """Start a chunked response, then vanish mid-body."""
    await reader.readuntil(b"\r\n\r\n")
    writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
    await writer.drain()
    writer.close()


@pytest.fixture
async def lab(tmp_path: Path) -> AsyncIterator[Lab]:
    alpha_app = create_app("alpha.lab", EventLog("web", io.StringIO()))
    beta_app = create_app("beta.lab", EventLog("web", io.StringIO()))
    beta_app[GATE] = asyncio.Event()
    beta_app.router.add_get("/drip", _drip)
    alpha = await Origin(alpha_app).start()
    beta = await Origin(beta_app).start()
    trunc = await asyncio.start_server(_truncating_origin, "127.0.0.1", 0)
    trunc_url = f"http://127.0.0.1:{trunc.sockets[0].getsockname()[1]}"
    config = {"routes": {"hidden.lab": alpha.url, "front.lab": beta.url,
                         "*.cdn.lab": beta.url, "down.lab": f"http://127.0.0.1:{_free_port()}",
                         "trunc.lab": trunc_url,
                         "meek.lab": {"origin": alpha.url, "mode": "reflector"}},
              "default": None}
    (tmp_path / "edge.json").write_text(json.dumps(config))
    args = edge.build_parser().parse_args([
        "--config", str(tmp_path / "edge.json"), "--listen", "127.0.0.1:0",
        "--http-listen", "127.0.0.1:0", "--ca-dir", str(tmp_path / "ca")])
    stream = io.StringIO()
    stop = asyncio.Event()
    task = asyncio.create_task(edge.serve(args, EventLog("edge", stream), stop))
    for _ in range(500):
        if task.done():
            task.result()
        if '"ready"' in stream.getvalue():
            break
        await asyncio.sleep(0.01)
    ready = json.loads(stream.getvalue().splitlines()[0])
    assert ready["event"] == "ready"
    ctx = LabCA.load_or_create(tmp_path / "ca").client_ssl_context()
    yield Lab(ready["tls_addresses"][0], ready["http_addresses"][0], ctx, alpha, beta, stream)
    beta_app[GATE].set()
    stop.set()
    await asyncio.wait_for(task, 5)
    await alpha.close()
    await beta.close()
    trunc.close()


async def _get(lab: Lab, host: str, path: str = "/", sni: str = "front.lab",
               **kw: Any) -> tuple[int, bytes]:
    async with aiohttp.ClientSession() as s, s.get(
            f"https://{lab.tls}{path}", ssl=lab.ctx, server_hostname=sni,
            headers={"Host": host, **kw.pop("headers", {})}, **kw) as r:
        return r.status, await r.read()


async def test_domain_fronting_routes_by_host_not_sni(lab: Lab) -> None:
    status, body = await _get(lab, "hidden.lab", sni="front.lab")
    assert status == 200 and b"alpha.lab" in body
    first_len = len(body)
    status, body = await _get(lab, "front.lab", sni="front.lab")
    assert status == 200 and b"beta.lab" in body
    status, body = await _get(lab, "HIDDEN.lab:443", sni="x.cdn.lab")
    assert b"alpha.lab" in body
    status, body = await _get(lab, "a.b.cdn.lab")
    assert status == 200 and b"beta.lab" in body
    proxied = lab.events("proxied")
    assert proxied[0]["sni"] == "front.lab" and proxied[0]["host"] == "hidden.lab"
    assert proxied[0]["origin"] == lab.alpha.url and proxied[0]["status"] == 200
    assert proxied[0]["bytes"] == first_len
    assert proxied[2]["sni"] == "x.cdn.lab"
    assert proxied[3]["route"] == "*.cdn.lab"


async def test_unknown_host_404_reveals_nothing(lab: Lab) -> None:
    for host in ("nowhere.lab", "cdn.lab", "hidden.lab.evil"):
        status, body = await _get(lab, host)
        assert status == 404
        assert b"127.0.0.1" not in body and b"alpha" not in body and b"beta" not in body
    assert lab.events("proxied")[-1]["origin"] is None


async def test_plain_http_listener(lab: Lab) -> None:
    async with aiohttp.ClientSession() as s, s.get(
            f"http://{lab.http}/ping", headers={"Host": "hidden.lab"}) as r:
        assert r.status == 200 and await r.text() == "pong\n"


async def test_client_address_headers(lab: Lab) -> None:
    status, body = await _get(lab, "hidden.lab", "/echo-headers")
    seen = json.loads(body)
    headers = seen["headers"]
    assert headers["x-forwarded-for"] == "127.0.0.1"
    assert headers["x-real-ip"] == "127.0.0.1"
    assert headers["forwarded"] == "for=127.0.0.1;proto=https"
    assert headers["host"] == "hidden.lab"
    assert seen["peer"] == "127.0.0.1"
    status, body = await _get(lab, "hidden.lab", "/echo-headers?x=1", headers={
        "X-Forwarded-For": "203.0.113.9", "Connection": "keep-alive, X-Secret",
        "X-Secret": "1", "X-Kept": "yes"})
    headers = json.loads(body)["headers"]
    assert headers["x-forwarded-for"] == "203.0.113.9, 127.0.0.1"
    assert headers["x-kept"] == "yes"
    assert "x-secret" not in headers and "connection" not in headers
    assert json.loads(body)["path"] == "/echo-headers?x=1"


async def test_streams_large_bodies_both_ways(lab: Lab) -> None:
    size, seed = 6 * 1024 * 1024 + 3, 11
    async with aiohttp.ClientSession() as s:
        async with s.get(f"https://{lab.tls}/bulk?size={size}&seed={seed}", ssl=lab.ctx,
                         server_hostname="front.lab", headers={"Host": "hidden.lab"}) as r:
            assert r.status == 200 and r.headers["Content-Length"] == str(size)
            digest = hashlib.sha256()
            async for piece in r.content.iter_chunked(65536):
                digest.update(piece)
        assert digest.hexdigest() == expected_sha256(size, seed)

        async def upload() -> AsyncIterator[bytes]:
            for piece in payload_chunks(size, seed):
                yield piece

        async with s.post(f"https://{lab.tls}/sink", data=upload(), ssl=lab.ctx,
                          server_hostname="front.lab", headers={"Host": "hidden.lab"}) as r:
            assert await r.json() == {"bytes": size, "sha256": expected_sha256(size, seed)}
        blob = b"".join(payload_chunks(1 << 20, 1))
        async with s.post(f"https://{lab.tls}/sink", data=blob, ssl=lab.ctx,
                          server_hostname="front.lab", headers={"Host": "hidden.lab"}) as r:
            assert await r.json() == {"bytes": len(blob),
                                      "sha256": hashlib.sha256(blob).hexdigest()}
        async with s.head(f"https://{lab.tls}/bulk?size=12345", ssl=lab.ctx,
                          server_hostname="front.lab", headers={"Host": "hidden.lab"}) as r:
            assert r.status == 200 and r.headers["Content-Length"] == "12345"
            assert await r.read() == b""
    assert [e["bytes"] for e in lab.events("proxied")][0] == size


async def test_responses_are_streamed_not_buffered(lab: Lab) -> None:
    gate = lab.beta.runner.app[GATE]
    async with aiohttp.ClientSession() as s, s.get(
            f"https://{lab.tls}/drip", ssl=lab.ctx, server_hostname="front.lab",
            headers={"Host": "front.lab"}) as r:
        first = await asyncio.wait_for(r.content.readexactly(6), 3)
        assert first == b"first|" and not gate.is_set()
        gate.set()
        assert await r.content.read() == b"second"


async def test_origin_unreachable_502(lab: Lab) -> None:
    status, body = await _get(lab, "down.lab")
    assert status == 502 and b"127.0.0.1" not in body
    assert lab.events("proxied")[-1]["status"] == 502


async def test_origin_dying_mid_body_is_not_a_clean_end(lab: Lab) -> None:
    with pytest.raises(aiohttp.ClientPayloadError):
        await _get(lab, "trunc.lab")
    await asyncio.sleep(0.05)
    last = lab.events("proxied")[-1]
    assert last["aborted"] == "origin" and last["bytes"] == 5


async def test_a_reflector_route_passes_only_meeks_headers(lab: Lab) -> None:
    """meek's reflector rules: Content-Type and X-Session-Id pass, Meek-IP is added,
    and nothing else (no X-Forwarded-For, no User-Agent) reaches the origin."""
    status, body = await _get(lab, "meek.lab", "/echo-headers", headers={
        "X-Session-Id": "0123456789abcdef", "Content-Type": "application/octet-stream",
        "User-Agent": "leaky/1.0", "X-Forwarded-For": "203.0.113.9", "Cookie": "a=b"})
    assert status == 200
    headers = json.loads(body)["headers"]
    assert headers["x-session-id"] == "0123456789abcdef"
    assert headers["content-type"] == "application/octet-stream"
    assert headers["meek-ip"] == "127.0.0.1"
    for gone in ("user-agent", "x-forwarded-for", "cookie", "forwarded", "x-real-ip"):
        assert gone not in headers
    async with aiohttp.ClientSession() as s, s.get(
            f"https://{lab.tls}/ping", ssl=lab.ctx, server_hostname="front.lab",
            headers={"Host": "meek.lab"}) as r:
        assert set(r.headers) <= {"Content-Type", "Content-Length", "Date", "Server"}


@pytest.mark.parametrize("route, needle", [
    ({"origin": "http://h", "mode": "mirror"}, "mode: must be cdn or reflector"),
    ({"origin": "http://h", "extra": 1}, "unknown key 'extra'"),
    ({"mode": "reflector"}, "routes['m.lab']"),
])
def test_bad_reflector_routes(tmp_path: Path, route: dict, needle: str) -> None:
    path = _write(tmp_path, "edge.json", json.dumps({"routes": {"m.lab": route}}))
    with pytest.raises(ConfigError, match=re.escape(needle)):
        edge.load_config(path)


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("text,needle", [
    ('{"routes": {}, "defualt": null}', "'defualt'"),
    ('{"routes": {"a.lab": "ftp://x"}}', "routes['a.lab']"),
    ('{"routes": {"a.lab": "http://"}}', "routes['a.lab']"),
    ('{"routes": {"a.lab": "http://h:99999"}}', "routes['a.lab']"),
    ('{"routes": {"a.lab": 5}}', "routes['a.lab']"),
    ('{"routes": {"bad host": "http://h"}}', "routes['bad host']"),
    ('{"routes": [], "default": null}', "routes"),
    ('{"routes": {}, "default": "nope"}', "default"),
    ("{not json", "cannot parse"),
])
def test_bad_config(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        edge.load_config(_write(tmp_path, "edge.json", text))
    assert needle in str(info.value)


def test_toml_config_and_matching(tmp_path: Path) -> None:
    cfg = edge.load_config(_write(tmp_path, "edge.toml", """
default = "http://198.18.9.9:80/"
[routes]
"front.lab" = "http://198.18.7.2:80"
"*.cdn.lab" = "https://198.18.7.3"
"*.b.cdn.lab" = "http://198.18.7.4:8080/base/"
"""))
    assert cfg.route("FRONT.lab.:8443") == ("front.lab", "http://198.18.7.2:80")
    assert cfg.route("x.cdn.lab")[1] == "https://198.18.7.3"
    assert cfg.route("y.b.cdn.lab")[1] == "http://198.18.7.4:8080/base"
    assert cfg.route("cdn.lab") == (None, "http://198.18.9.9:80")
    assert cfg.route(None) == (None, "http://198.18.9.9:80")
    with pytest.raises(ConfigError):
        edge.load_config(tmp_path / "missing.toml")


async def test_missing_cert_is_config_error(tmp_path: Path) -> None:
    cfg = _write(tmp_path, "e.json", '{"routes": {"a.lab": "http://127.0.0.1:1"}}')
    args = edge.build_parser().parse_args(["--config", str(cfg), "--listen", "127.0.0.1:0"])
    with pytest.raises(ConfigError, match="--ca-dir"):
        await edge.serve(args, EventLog("edge", io.StringIO()), asyncio.Event())


async def test_subprocess_bad_config_exits_2(tmp_path: Path) -> None:
    cfg = _write(tmp_path, "e.json", '{"routes": {"a.lab": "gopher://x"}}')
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ptlab.services.edge", "--config", str(cfg),
        "--http-listen", "127.0.0.1:0", stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=dict(os.environ, PYTHONPATH=str(REPO)))
    out, err = await asyncio.wait_for(proc.communicate(), 10)
    assert proc.returncode == 2
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1 and "routes['a.lab']" in lines[0] and out == b""
