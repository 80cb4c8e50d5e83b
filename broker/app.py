"""The Snowflake broker as an aiohttp application (Tor's wire formats as of 2.14.1).

Proxies long-poll ``/proxy`` for a client; a client posts its offer to
``/client`` (or through an AMP cache at ``/amp/client/…``), the broker hands
it to the least-loaded suitable proxy, and that proxy's ``/answer`` completes
the client's request. Every logical outcome is HTTP 200 with JSON, as in Tor's
broker, so Debian's 2.5.1 binaries and the current release work unchanged; a
client poll the broker cannot use is a 200 with ``{"error": …}``, as in Tor's.
Where Tor's broker answers a bad proxy poll or answer with a bare 400, ours says
why in the body, and it adds what Tor's lacks: per-source rate limiting (429)
and a body-size cap (413). What changed since 2.5.1 is in
docs/transports/snowflake.md §9.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from fractions import Fraction

from aiohttp import web

from transports.common.budget import QuietErrors
from transports.snowflake import amp
from transports.snowflake import messages as m
from transports.snowflake.relaypattern import RelayPattern

from .bridges import DEFAULT, Bridge
from .dpmetrics import Histogram, Ledger, Rng, guarantee
from .labgeo import LabGeoIP
from .pools import ClientOffer, Pools, Snowflake
from .ratelimit import RateLimiter, source_address

log = logging.getLogger(__name__)

READ_LIMIT = 100_000  # Tor's readLimit
CORS = {"Access-Control-Allow-Origin": "*",
        "Access-Control-Allow-Headers": "Origin, X-Session-ID"}


@dataclass
class MetricsConfig:
    """Differentially private metrics (:mod:`.dpmetrics`): per period, one release of
    client polls and one of proxy polls by country, each spending ``epsilon``."""

    epsilon: Fraction = Fraction(1, 2)
    budget: Fraction = Fraction(1)  # per period: two releases of epsilon each
    max_contribution: int = 1
    period: str = "day"
    geoip: LabGeoIP = field(default_factory=LabGeoIP)


@dataclass
class BrokerConfig:
    """Timers are parameters so tests run them short. Defaults are Tor's 2.14.1 values:
    10 s proxy polls, 5 s for a client's answer (10 s before 2.11), NextPoll 20 s.

    ``default_relay_pattern`` is 2.5.1's: the pattern presumed for a proxy that sends
    none. Tor's broker dropped it in 2.12 and refuses such a poll; None does too."""

    proxy_timeout_s: float = 10.0
    client_timeout_s: float = 5.0
    next_poll_ms: int | None = 20_000
    rejected_next_poll_ms: int = 3_600_000
    allowed_relay_pattern: str = "snowflake.torproject.net$"
    default_relay_pattern: str | None = None
    bridges: dict[str, Bridge] = field(default_factory=lambda: {DEFAULT.fingerprint: DEFAULT})
    rate_per_s: float = 20.0
    burst: float = 60.0
    trusted_edges: tuple[str, ...] = ()
    read_limit: int = READ_LIMIT
    # Pool proxies that report NAT "unknown" with the unrestricted ones. Tor's
    # broker never does; a lab without NAT (where Debian's 2.5.1 proxy cannot
    # reach its hard-wired probe service) should.
    unknown_proxies_unrestricted: bool = False
    metrics: MetricsConfig = field(default_factory=MetricsConfig)


@dataclass
class Stats:
    proxy_polls: int = 0
    proxy_matches: int = 0
    relay_rejected: int = 0
    client_polls: int = 0
    client_matched: int = 0
    client_denied: int = 0
    client_timeouts: int = 0
    bad_requests: int = 0
    rate_limited: int = 0


class Broker:
    """State and handlers; :meth:`app` builds the aiohttp application."""

    def __init__(self, config: BrokerConfig | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config or BrokerConfig()
        self.pools = Pools(self.config.unknown_proxies_unrestricted)
        self.stats = Stats()
        self.allowed = RelayPattern.parse(self.config.allowed_relay_pattern)
        self.limiter = RateLimiter(self.config.rate_per_s, self.config.burst, clock,
                                   trusted=self.config.trusted_edges)
        # Observers: called with (kind, source address, detail).
        self.observers: list[Callable[[str, str, dict], None]] = [self._count]
        self.published: dict | None = None
        # Bad requests and rate limiting are expected from strangers: counted, one
        # line a second each, with nothing of the request in it (it is the sender's
        # text, and may name an address). Python's logging at info level by default.
        self.failures = QuietErrors(log.info, clock=clock)
        self.new_period()

    # -- plumbing -----------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.config.read_limit,
                              middlewares=[self._middleware])
        app.router.add_post("/proxy", self.proxy)
        app.router.add_post("/answer", self.answer)
        app.router.add_post("/client", self.client)
        app.router.add_get("/amp/client/{path:.*}", self.amp_client)
        app.router.add_get("/debug", self.debug)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/robots.txt", self.robots)
        app.router.add_route("OPTIONS", "/{tail:.*}", self.options)
        return app

    @web.middleware
    async def _middleware(self, request: web.Request,
                          handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                          ) -> web.StreamResponse:
        if request.method == "POST" or request.path.startswith("/amp/"):
            key = self.source(request)
            if not self.limiter.allow(key):
                self.stats.rate_limited += 1
                self.failures.report("rate-limited", "a request over its source's rate was "
                                                     "answered 429")
                return self._json({"error": "rate limited"}, 429, {
                    "Retry-After": str(max(1, round(self.limiter.retry_after(key))))})
        try:
            resp = await handler(request)
        except web.HTTPException as exc:
            if exc.status == 413:
                self.stats.bad_requests += 1
                self.failures.report("too-large", "a request over the read limit was "
                                                  "answered 413")
                return self._json({"error": f"body over {self.config.read_limit} bytes"}, 413)
            exc.headers.update(CORS)
            raise
        resp.headers.update(CORS)
        return resp

    def source(self, request: web.Request) -> str:
        return source_address(request.remote, request.headers.get("X-Forwarded-For"),
                              self.limiter.trusted)

    @staticmethod
    def _json(obj: dict, status: int = 200, headers: dict[str, str] | None = None
              ) -> web.Response:
        return web.Response(body=json.dumps(obj).encode(), status=status,
                            content_type="application/json", headers={**CORS, **(headers or {})})

    def _bad(self, why: str) -> web.Response:
        self.stats.bad_requests += 1
        self.failures.report("bad-request", "a request the broker cannot use was answered 400")
        return self._json({"error": why}, 400)

    def _observe(self, kind: str, request: web.Request, **detail: object) -> None:
        for obs in self.observers:
            obs(kind, self.source(request), detail)

    # -- proxies --------------------------------------------------------------------------

    def pattern_ok(self, poll: m.ProxyPoll) -> bool:
        text = poll.relay_pattern
        if text is None:  # a proxy from before relay URLs: refused, unless configured
            text = self.config.default_relay_pattern
            if text is None:
                return False
        return RelayPattern.parse(text).covers(self.allowed)

    async def proxy(self, request: web.Request) -> web.Response:
        try:
            poll = m.ProxyPoll.decode(await request.read())
        except m.MessageError as exc:
            return self._bad(str(exc))
        self.stats.proxy_polls += 1
        self._observe("proxy", request, nat=poll.nat, type=poll.proxy_type)
        nxt = self.config.next_poll_ms
        if not self.pattern_ok(poll):
            self.stats.relay_rejected += 1
            return self._raw(m.ProxyPollResponse(
                m.STATUS_BAD_RELAY, next_poll_ms=self.config.rejected_next_poll_ms
                if nxt is not None else None).encode())
        loop = asyncio.get_running_loop()
        sf = Snowflake(poll.sid, poll.proxy_type, poll.nat, poll.clients,
                       loop.create_future(), loop.create_future())
        old = self.pools.by_sid.get(poll.sid)
        if old is not None and not old.offer.done():
            self.pools.withdraw(old)  # the same proxy polls again: the newer poll counts
        self.pools.add(sf)
        try:
            await asyncio.wait_for(asyncio.shield(sf.offer), self.config.proxy_timeout_s)
        except TimeoutError:
            pass
        finally:
            if not sf.offer.done():
                self.pools.withdraw(sf)
        # Read the future, not wait_for's outcome: a client may take this proxy in the
        # very iteration its timer fires, and that offer must not be lost.
        offer = sf.offer.result() if sf.offer.done() else None
        if offer is None:
            return self._raw(m.ProxyPollResponse(m.STATUS_NO_MATCH, next_poll_ms=nxt).encode())
        self.stats.proxy_matches += 1
        relay = self.config.bridges[offer.fingerprint].relay_url
        return self._raw(m.ProxyPollResponse(m.STATUS_MATCH, offer.offer, offer.nat, relay,
                                             nxt).encode())

    async def answer(self, request: web.Request) -> web.Response:
        try:
            ans = m.AnswerRequest.decode(await request.read())
        except m.MessageError as exc:
            return self._bad(str(exc))
        sf = self.pools.by_sid.get(ans.sid)
        if sf is None or not sf.offer.done() or sf.answer.done():
            return self._raw(m.encode_answer_response(m.STATUS_CLIENT_GONE))
        sf.answer.set_result(ans.answer)
        return self._raw(m.encode_answer_response(m.STATUS_SUCCESS))

    # -- clients --------------------------------------------------------------------------

    async def client(self, request: web.Request) -> web.Response:
        body = await request.read()
        legacy = body.startswith(b"{")
        if legacy:  # the raw offer, NAT type in a header (Tor's legacy shim)
            body = m.ClientPoll(body.decode("utf-8", "replace"),
                                request.headers.get("Snowflake-NAT-Type", "") or "unknown"
                                ).encode()
        try:
            poll = m.ClientPoll.decode(body)
        except m.MessageError as exc:
            resp: m.ClientPollResponse = self._refused(str(exc))
        else:
            resp = await self.exchange(poll, request)
        if resp.error and resp.error not in (m.ERR_NO_PROXIES, m.ERR_TIMED_OUT) and legacy:
            return self._json({"error": resp.error}, 400)  # Tor's broker panics here
        if not legacy:
            return self._raw(resp.encode())
        if resp.answer:
            return web.Response(body=resp.answer.encode(), headers=CORS)
        return web.Response(status=503 if resp.error == m.ERR_NO_PROXIES else 504, headers=CORS)

    def _refused(self, why: str) -> m.ClientPollResponse:
        """A client poll the broker cannot use: Tor's broker answers it 200 with the
        reason as the error (2.5.1 sent a bare 500 for an unknown bridge)."""
        self.stats.bad_requests += 1
        self.failures.report("bad-request", "a client poll the broker cannot use was refused")
        return m.ClientPollResponse(error=why)

    async def exchange(self, poll: m.ClientPoll, request: web.Request) -> m.ClientPollResponse:
        """Match one client poll: deliver its offer, wait for the proxy's answer."""
        if poll.fingerprint not in self.config.bridges:
            return self._refused(m.ERR_UNKNOWN_BRIDGE)
        try:  # 2.14.1 checks the description's JSON; ours also that it is an SDP offer
            m.check_description(poll.offer)
            m.decode_sdp(poll.offer, "offer")
        except m.MessageError as exc:
            return self._refused(str(exc))
        self.stats.client_polls += 1
        sf = self.pools.match(poll.nat)
        self._observe("client", request, nat=poll.nat, matched=sf is not None)
        if sf is None:
            self.stats.client_denied += 1
            return m.ClientPollResponse(error=m.ERR_NO_PROXIES)
        sf.offer.set_result(ClientOffer(poll.offer, poll.nat, poll.fingerprint))
        try:
            answer = await asyncio.wait_for(asyncio.shield(sf.answer),
                                            self.config.client_timeout_s)
        except TimeoutError:
            self.stats.client_timeouts += 1
            return m.ClientPollResponse(error=m.ERR_TIMED_OUT)
        finally:
            self.pools.forget(sf)
        self.stats.client_matched += 1
        return m.ClientPollResponse(answer=answer)

    async def amp_client(self, request: web.Request) -> web.Response:
        """``GET /amp/client/0<cache breaker>/<base64url poll>``, answered as AMP HTML."""
        path = request.match_info["path"]
        resp: m.ClientPollResponse
        try:
            if not path.startswith("0"):
                raise ValueError
            data = path.rsplit("/", 1)[-1]
            body = base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))
            poll = m.ClientPoll.decode(body)
        except (ValueError, binascii.Error):
            resp = m.ClientPollResponse(error="cannot decode URL path")
        else:
            resp = await self.exchange(poll, request)
        return web.Response(body=amp.encode(resp.encode()), content_type="text/html",
                            headers={**CORS, "Cache-Control": "max-age=15"})

    # -- metrics ------------------------------------------------------------------------

    def new_period(self) -> None:
        mc = self.config.metrics
        keys = mc.geoip.countries()
        self.period_hist = {kind: Histogram(keys, mc.max_contribution)
                            for kind in ("client", "proxy")}
        self.ledger = Ledger(mc.budget)

    def _count(self, kind: str, source: str, detail: dict) -> None:
        self.period_hist[kind].add(source, self.config.metrics.geoip.country(source))

    def publish(self, rng: Rng | None = None) -> dict:
        """Release this period's counts (noisy, per country) and start a new period.
        BudgetExceeded if the period's ledger cannot pay for both releases."""
        mc = self.config.metrics
        out: dict[str, object] = {
            "period": mc.period, "epsilon_per_release": str(mc.epsilon),
            "guarantee": guarantee(mc.epsilon, mc.max_contribution, mc.period)}
        for kind, hist in self.period_hist.items():
            out[f"{kind}_polls_by_country"] = hist.release(mc.epsilon, self.ledger, rng)
        self.published = out
        self.new_period()
        return out

    async def metrics(self, request: web.Request) -> web.Response:
        if self.published is None:
            return web.Response(status=404, text="no metrics published yet\n", headers=CORS)
        return self._json(self.published)

    # -- the rest -------------------------------------------------------------------------

    async def debug(self, request: web.Request) -> web.Response:
        """Tor's text, line for line (2.14.1 ``IPC.Debug``): the count, the known proxy
        types present, unknown types, then the NAT types; no final newline."""
        avail = self.pools.available()
        lines = [f"current snowflakes available: {sum(avail.values())}"]
        by_type: dict[str, int] = {}
        by_nat = {"restricted": 0, "unrestricted": 0, "unknown": 0}
        for (ptype, nat), n in avail.items():
            by_type[ptype] = by_type.get(ptype, 0) + n
            by_nat[nat] = by_nat.get(nat, 0) + n
        unknown = by_type.pop("unknown", 0)
        lines += [f"\t{t} proxies: {n}" for t, n in sorted(by_type.items())]
        lines += [f"\tunknown proxies: {unknown}", "NAT Types available:"]
        lines += [f"\t{t}: {n}" for t, n in by_nat.items()]
        return web.Response(text="\n".join(lines), headers=CORS)

    async def robots(self, request: web.Request) -> web.Response:
        return web.Response(text="User-agent: *\nDisallow: /\n")

    async def options(self, request: web.Request) -> web.Response:
        return web.Response(headers=CORS)

    @staticmethod
    def _raw(body: bytes) -> web.Response:
        return web.Response(body=body, headers=CORS)
