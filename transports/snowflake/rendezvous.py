"""The client's exchange of an SDP offer for an answer through the broker
(docs/transports/snowflake.md §2.4, §2.7, §4.2).

Three ways to reach the broker, as Tor's client has:

* **direct**: ``POST <url>/client`` with the "1.0" client poll;
* **domain-fronted**: the same request sent to the ``front`` host (TCP and TLS
  SNI name the front), with the ``Host`` header naming the broker; the CDN
  edge routes by ``Host``;
* **AMP cache**: ``GET`` of the poll armoured into a URL path, through the
  cache's ``/c/[s/]<broker host>`` form, and the answer read out of an AMP
  page. A non-200 response, or a 200 with a ``Location`` header, is an error.

Proxy environment variables are ignored and the response header wait is 15 s,
as in Tor's client.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from . import amp
from . import messages as m

RESPONSE_HEADER_TIMEOUT_S = 15.0


class RendezvousError(Exception):
    """The broker did not give us an answer (no proxies, timeout, bad reply)."""


@dataclass
class RendezvousConfig:
    broker_url: str
    front: str | None = None
    amp_cache: str | None = None
    fingerprint: str = m.DEFAULT_BRIDGE_FINGERPRINT
    nat: str = "unknown"
    ssl_context: ssl.SSLContext | None = None

    def __post_init__(self) -> None:
        parts = urlsplit(self.broker_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"broker URL must be http(s)://host/…, got {self.broker_url!r}")
        if self.amp_cache is not None:
            cache = urlsplit(self.amp_cache)
            if cache.scheme not in ("http", "https") or not cache.hostname:
                raise ValueError(f"AMP cache URL must be http(s)://host/…, got {self.amp_cache!r}")
        if self.front is not None and ("/" in self.front or not self.front):
            raise ValueError(f"front must be a host name, got {self.front!r}")


def _fronted(url: str, front: str | None) -> tuple[str, dict[str, str]]:
    """The URL to connect to and the headers, with the front swapped in."""
    if front is None:
        return url, {}
    parts = urlsplit(url)
    netloc = front if parts.port is None else f"{front}:{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc)), {"Host": parts.netloc}


def amp_cache_url(broker_url: str, cache_url: str) -> str:
    """The broker URL rewritten into the AMP cache's path form:
    ``<cache>/c/[s/]<broker host>[:port]<broker path>``."""
    b, c = urlsplit(broker_url), urlsplit(cache_url)
    secure = "s/" if b.scheme == "https" else ""
    path = f"{c.path.rstrip('/')}/c/{secure}{b.netloc}{b.path.rstrip('/')}"
    return urlunsplit((c.scheme, c.netloc, path, "", ""))


class Rendezvous:
    """Offer in, answer out, by the configured method."""

    def __init__(self, config: RendezvousConfig) -> None:
        self.config = config

    def _session(self) -> aiohttp.ClientSession:
        timeout = aiohttp.ClientTimeout(total=None, sock_read=RESPONSE_HEADER_TIMEOUT_S,
                                        sock_connect=RESPONSE_HEADER_TIMEOUT_S)
        connector = aiohttp.TCPConnector(ssl=self.config.ssl_context
                                         if self.config.ssl_context is not None else True)
        return aiohttp.ClientSession(timeout=timeout, connector=connector, trust_env=False)

    async def exchange(self, offer_sdp: str) -> str:
        """The answer SDP for ``offer_sdp``; :class:`RendezvousError` otherwise."""
        cfg = self.config
        poll = m.ClientPoll(m.encode_sdp("offer", offer_sdp), cfg.nat, cfg.fingerprint).encode()
        try:
            async with self._session() as http:
                if cfg.amp_cache is not None:
                    body = await self._amp(http, poll)
                else:
                    body = await self._post(http, poll)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise RendezvousError(f"broker unreachable: {exc}") from None
        try:
            resp = m.ClientPollResponse.decode(body)
        except m.MessageError as exc:
            raise RendezvousError(f"bad broker response: {exc}") from None
        if resp.error:
            raise RendezvousError(resp.error)
        try:
            return m.decode_sdp(resp.answer, "answer")
        except m.MessageError as exc:
            raise RendezvousError(f"bad answer from the broker: {exc}") from None

    async def _post(self, http: aiohttp.ClientSession, poll: bytes) -> bytes:
        url, headers = _fronted(self.config.broker_url.rstrip("/") + "/client", self.config.front)
        async with http.post(url, data=poll, headers=headers, allow_redirects=False) as r:
            body = await r.read()
            if r.status != 200:
                raise RendezvousError(f"broker answered HTTP {r.status}: {body[:200]!r}")
            return body

    async def _amp(self, http: aiohttp.ClientSession, poll: bytes) -> bytes:
        assert self.config.amp_cache is not None
        base = amp_cache_url(self.config.broker_url, self.config.amp_cache)
        url, headers = _fronted(base + amp.client_path(poll), self.config.front)
        async with http.get(url, headers=headers, allow_redirects=False) as r:
            page = await r.read()
            if r.status != 200 or "Location" in r.headers:
                raise RendezvousError(f"AMP cache answered HTTP {r.status}")
        try:
            return amp.decode(page)
        except amp.AmpError as exc:
            raise RendezvousError(str(exc)) from None
