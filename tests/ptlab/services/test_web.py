"""The web server over real loopback sockets, in process and as a subprocess."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from ptcommon.events import EventLog
from ptlab.services import web
from ptlab.services.ca import LabCA
from ptlab.services.main import ConfigError
from ptlab.services.payload import expected_sha256

REPO = Path(__file__).resolve().parents[3]


class Running:
    """A ``serve`` coroutine running in this loop, with its captured events."""

    def __init__(self, argv: list[str]) -> None:
        self.stream = io.StringIO()
        self.events = EventLog("web", self.stream)
        self.stop = asyncio.Event()
        self.task = asyncio.create_task(
            web.serve(web.build_parser().parse_args(argv), self.events, self.stop))

    def records(self, event: str | None = None) -> list[dict[str, Any]]:
        recs = [json.loads(line) for line in self.stream.getvalue().splitlines()]
        return [r for r in recs if event is None or r["event"] == event]

    async def ready(self) -> dict[str, Any]:
        for _ in range(500):
            if self.task.done():
                self.task.result()
            if found := self.records("ready"):
                return found[0]
            await asyncio.sleep(0.01)
        raise AssertionError("no ready event")

    async def close(self) -> None:
        self.stop.set()
        await asyncio.wait_for(self.task, 5)


@pytest.fixture
async def site() -> AsyncIterator[tuple[Running, str]]:
    running = Running(["--listen", "127.0.0.1:0", "--name", "alpha.lab"])
    ready = await running.ready()
    yield running, f"http://{ready['addresses'][0]}"
    await running.close()


async def test_bulk_download_hash(site: tuple[Running, str]) -> None:
    running, base = site
    size, seed = 3 * 1024 * 1024 + 5, 42
    async with aiohttp.ClientSession() as s, s.get(f"{base}/bulk",
                                                   params={"size": size, "seed": seed}) as r:
        assert r.status == 200
        assert r.headers["Content-Length"] == str(size)
        digest = hashlib.sha256()
        async for piece in r.content.iter_chunked(65536):
            digest.update(piece)
    assert digest.hexdigest() == expected_sha256(size, seed)
    await asyncio.sleep(0.05)
    reqs = running.records("request")
    assert reqs[-1]["path"] == "/bulk" and reqs[-1]["bytes"] == size
    assert reqs[-1]["status"] == 200 and reqs[-1]["peer"] == "127.0.0.1"


@pytest.mark.parametrize("query", ["size=-1", "size=abc", "", "size=10&seed=x",
                                   f"size={5 << 30}"])
async def test_bulk_bad_params_400(site: tuple[Running, str], query: str) -> None:
    _, base = site
    async with aiohttp.ClientSession() as s, s.get(f"{base}/bulk?{query}") as r:
        assert r.status == 400


async def test_small_routes(site: tuple[Running, str]) -> None:
    running, base = site
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{base}/ping") as r:
            assert r.status == 200 and await r.text() == "pong\n"
        async with s.get(f"{base}/") as r:
            assert "alpha.lab" in await r.text()
            assert r.content_type == "text/html"
        async with s.get(f"{base}/echo-headers", headers={"X-Probe": "1"}) as r:
            body = await r.json()
            assert body["headers"]["x-probe"] == "1" and body["peer"] == "127.0.0.1"
        async with s.post(f"{base}/sink", data=b"x" * 100_000) as r:
            assert await r.json() == {"bytes": 100_000,
                                      "sha256": hashlib.sha256(b"x" * 100_000).hexdigest()}
        async with s.get(f"{base}/missing") as r:
            assert r.status == 404
    statuses = [(r["path"], r["status"]) for r in running.records("request")]
    assert statuses == [("/ping", 200), ("/", 200), ("/echo-headers", 200),
                        ("/sink", 200), ("/missing", 404)]


async def test_garbage_request_does_not_kill_server(site: tuple[Running, str]) -> None:
    _, base = site
    host, port = base.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"\x16\x03\x01 not http at all\r\n\r\n")
    await writer.drain()
    await reader.read()
    writer.close()
    async with aiohttp.ClientSession() as s, s.get(f"{base}/ping") as r:
        assert r.status == 200


async def test_https_and_ipv6_listeners(tmp_path: Path) -> None:
    lab_ca = LabCA.load_or_create(tmp_path)
    cert, key = lab_ca.issue(["site.lab"], ["127.0.0.1", "::1"], "site")
    running = Running(["--listen", "127.0.0.1:0", "--listen", "[::1]:0", "--tls-cert",
                       str(cert), "--tls-key", str(key), "--name", "site.lab"])
    try:
        ready = await running.ready()
        assert ready["tls"] is True
        v4, v6 = ready["addresses"]
        ctx = lab_ca.client_ssl_context()
        host, port = v4.rsplit(":", 1)
        _, writer = await asyncio.open_connection(host, int(port), ssl=ctx,
                                                  server_hostname="site.lab")
        assert writer.get_extra_info("ssl_object").version() == "TLSv1.3"
        writer.close()
        async with aiohttp.ClientSession() as s:
            async with s.get(f"https://{v4}/ping", ssl=ctx, server_hostname="site.lab") as r:
                assert await r.text() == "pong\n"
            async with s.get(f"https://{v6}/bulk?size=1000&seed=3", ssl=ctx) as r:
                assert hashlib.sha256(await r.read()).hexdigest() == expected_sha256(1000, 3)
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            async with aiohttp.ClientSession() as s:
                await s.get(f"https://{v4}/ping", ssl=ctx, server_hostname="other.lab")
    finally:
        await running.close()


def test_parse_listen() -> None:
    assert web.parse_listen("127.0.0.1:0", 80) == ("127.0.0.1", 0)
    assert web.parse_listen("[::1]:8443", 80) == ("::1", 8443)
    assert web.parse_listen("[::]", 443) == ("::", 443)
    assert web.parse_listen(":8080", 80) == ("0.0.0.0", 8080)
    assert web.parse_listen("198.18.7.2", 80) == ("198.18.7.2", 80)
    for bad in ("::1:80", "1.2.3.4:99999", "[::1", "h:x"):
        with pytest.raises(ConfigError):
            web.parse_listen(bad, 80)


async def test_bad_tls_config_is_config_error(tmp_path: Path) -> None:
    args = web.build_parser().parse_args(["--listen", "127.0.0.1:0", "--tls-cert",
                                          str(tmp_path / "nope.pem"), "--tls-key", "k"])
    with pytest.raises(ConfigError):
        await web.serve(args, EventLog("web", io.StringIO()), asyncio.Event())


async def test_subprocess_ready_and_sigterm() -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ptlab.services.web", "--listen", "127.0.0.1:0",
        "--listen", "[::1]:0", "--name", "sub.lab",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    assert proc.stdout is not None
    try:
        ready = json.loads(await asyncio.wait_for(proc.stdout.readline(), 10))
        assert ready["event"] == "ready" and ready["component"] == "web"
        v4, v6 = ready["addresses"]
        assert v4.startswith("127.0.0.1:") and not v4.endswith(":0")
        assert v6.startswith("[::1]:") and not v6.endswith(":0")
        async with aiohttp.ClientSession() as s, s.get(f"http://{v4}/ping") as r:
            assert await r.text() == "pong\n"
        proc.send_signal(signal.SIGTERM)
        out, err = await asyncio.wait_for(proc.communicate(), 10)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err
    events = [json.loads(line)["event"] for line in out.decode().splitlines()]
    assert events == ["request", "stopped"]

