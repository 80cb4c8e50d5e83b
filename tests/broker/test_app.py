"""The broker over real HTTP (aiohttp's test server), with short timers."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.app import Broker, BrokerConfig
from broker.bridges import Bridge
from transports.snowflake import amp
from transports.snowflake import messages as m

FP = "2B280B23E1107BB62ABFC40DDCC8824814F80A72"
FP2 = "8838024498816A039FCBBAB14E6F40A0843051FA"
OFFER = m.encode_sdp("offer", "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\n")
ANSWER = m.encode_sdp("answer", "v=0\r\no=- 2 2 IN IP4 0.0.0.0\r\na=setup:active\r\n")


def config(**kw) -> BrokerConfig:
    base = dict(proxy_timeout_s=0.3, client_timeout_s=0.5,
                allowed_relay_pattern="^snowflake.lab$", default_relay_pattern="^snowflake.lab$",
                bridges={FP: Bridge("one", "wss://snowflake.lab/", FP),
                         FP2: Bridge("two", "wss://snowflake.lab/two", FP2)},
                rate_per_s=1000.0, burst=1000.0)
    base.update(kw)
    return BrokerConfig(**base)


@pytest.fixture
async def broker():
    made: list[TestClient] = []

    async def start(**kw) -> tuple[Broker, TestClient]:
        b = Broker(config(**kw))
        client = TestClient(TestServer(b.app()))
        await client.start_server()
        made.append(client)
        return b, client

    yield start
    for c in made:
        await c.close()


def poll(sid: str, nat: str = "unrestricted", clients: int = 0,
         pattern: str | None = "^snowflake.lab$") -> bytes:
    return m.ProxyPoll(sid, "standalone", nat, clients, pattern).encode()


async def proxy_poll(http: TestClient, body: bytes) -> m.ProxyPollResponse:
    r = await http.post("/proxy", data=body)
    assert r.status == 200
    return m.ProxyPollResponse.decode(await r.read())


async def client_poll(http: TestClient, nat: str = "restricted", fp: str = FP
                      ) -> m.ClientPollResponse:
    r = await http.post("/client", data=m.ClientPoll(OFFER, nat, fp).encode())
    assert r.status == 200
    return m.ClientPollResponse.decode(await r.read())


async def waiting(b: Broker, n: int) -> None:
    for _ in range(100):
        if sum(b.pools.available().values()) >= n:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("proxies never reached the pool")


def test_debian_proxy_poll_bytes_round_trip():
    """The exact body Debian's snowflake-proxy 2.5.1 sent (docs/transports/snowflake.md §2.2)."""
    wire = (b'{"Sid":"RJRe3qo/9SdtRa6ZoM7Esw","Version":"1.3","Type":"standalone",'
            b'"NAT":"unknown","Clients":0,"AcceptedRelayPattern":"127.0.0.1$"}')
    p = m.ProxyPoll.decode(wire)
    assert (p.sid, p.nat, p.clients, p.relay_pattern) == ("RJRe3qo/9SdtRa6ZoM7Esw", "unknown",
                                                          0, "127.0.0.1$")
    assert p.encode() == wire and len(wire) == 132


async def test_a_full_rendezvous(broker):
    b, http = await broker()
    proxy = asyncio.create_task(proxy_poll(http, poll("sid-a")))
    await waiting(b, 1)
    client = asyncio.create_task(client_poll(http, fp=FP2))
    got = await proxy
    assert got.status == m.STATUS_MATCH and got.offer == OFFER and got.nat == "restricted"
    assert got.relay_url == "wss://snowflake.lab/two" and got.next_poll_ms == 20_000
    r = await http.post("/answer", data=m.AnswerRequest("sid-a", ANSWER).encode())
    assert json.loads(await r.read()) == {"Status": "success"}
    assert (await client).answer == ANSWER
    assert b.stats.client_matched == 1 and not b.pools.by_sid
    # The Sid is spent: a late second answer finds the client gone.
    r = await http.post("/answer", data=m.AnswerRequest("sid-a", ANSWER).encode())
    assert json.loads(await r.read()) == {"Status": "client gone"}


async def test_no_proxy_no_match_and_timeouts(broker):
    b, http = await broker()
    assert (await client_poll(http)).error == m.ERR_NO_PROXIES
    got = await proxy_poll(http, poll("lonely"))
    assert got.status == m.STATUS_NO_MATCH and got.offer == "" and got.relay_url == ""
    assert not b.pools.available()
    # A proxy that never answers: the client times out, the Sid is forgotten.
    proxy = asyncio.create_task(proxy_poll(http, poll("mute")))
    await waiting(b, 1)
    assert (await client_poll(http)).error == m.ERR_TIMED_OUT
    await proxy
    assert "mute" not in b.pools.by_sid and b.stats.client_timeouts == 1


async def test_least_loaded_proxy_first(broker):
    b, http = await broker()
    busy = asyncio.create_task(proxy_poll(http, poll("busy", clients=16)))
    idle = asyncio.create_task(proxy_poll(http, poll("idle", clients=0)))
    await waiting(b, 2)
    client = asyncio.create_task(client_poll(http))
    assert (await idle).status == m.STATUS_MATCH
    assert (await busy).status == m.STATUS_NO_MATCH
    client.cancel()


@pytest.mark.parametrize("proxies, client_nat, winner", [
    (["restricted"], "restricted", None),          # restricted pairs only with unrestricted
    (["unknown"], "unknown", None),
    (["unrestricted"], "restricted", "unrestricted"),
    (["unrestricted", "restricted"], "unrestricted", "restricted"),  # scarce kind first
    (["unrestricted"], "unrestricted", "unrestricted"),  # 2.8's fallback
])
async def test_nat_matching(broker, proxies, client_nat, winner):
    b, http = await broker()
    tasks = {nat: asyncio.create_task(proxy_poll(http, poll(f"s-{nat}", nat)))
             for nat in proxies}
    await waiting(b, len(proxies))
    client = asyncio.create_task(client_poll(http, client_nat))
    results = {nat: (await t).status for nat, t in tasks.items()}
    matched = [nat for nat, s in results.items() if s == m.STATUS_MATCH]
    assert matched == ([winner] if winner else [])
    if winner is None:
        assert (await client).error == m.ERR_NO_PROXIES
    else:
        client.cancel()


async def test_unknown_proxies_can_be_pooled_as_unrestricted_in_a_lab_without_nat(broker):
    for flag, status in ((False, m.STATUS_NO_MATCH), (True, m.STATUS_MATCH)):
        b, http = await broker(unknown_proxies_unrestricted=flag)
        proxy = asyncio.create_task(proxy_poll(http, poll(f"u{flag}", "unknown")))
        await waiting(b, 1)
        client = asyncio.create_task(client_poll(http, "unknown"))
        assert (await proxy).status == status
        client.cancel()


@pytest.mark.parametrize("pattern, ok", [
    ("^snowflake.lab$", True), ("snowflake.lab$", True), ("lab$", True), ("$", True),
    ("^other.lab$", False), ("^lab$", False), ("evil.example$", False),
    (None, True),  # no pattern: judged by the default pattern (2.5.1's option)
])
async def test_relay_pattern_superset_rule(broker, pattern, ok):
    b, http = await broker(proxy_timeout_s=0.05)
    got = await proxy_poll(http, poll("p", pattern=pattern))
    if ok:
        assert got.status == m.STATUS_NO_MATCH
    else:
        assert got.status == m.STATUS_BAD_RELAY and got.next_poll_ms == 3_600_000
        assert b.stats.relay_rejected == 1


async def test_a_poll_without_a_pattern_is_refused_without_a_default_as_by_tor_since_2_12(
        broker):
    b, http = await broker(proxy_timeout_s=0.05, default_relay_pattern=None)
    got = await proxy_poll(http, poll("p", pattern=None))
    assert got.status == m.STATUS_BAD_RELAY and got.next_poll_ms == 3_600_000
    got = await proxy_poll(http, poll("q"))
    assert got.status == m.STATUS_NO_MATCH


@pytest.mark.parametrize("path, body, status, why", [
    ("/proxy", b"{not json", 400, "not JSON"),
    ("/proxy", b'{"Sid":"x","Version":"2.0"}', 400, "unknown version"),
    ("/proxy", b'{"Sid":"","Version":"1.3"}', 400, "no session id"),
    ("/proxy", b'{"Sid":"x","Version":"1.3","NAT":"open"}', 400, "invalid NAT"),
    ("/proxy", b'{"Sid":"x","Version":"1.3","Clients":1.5}', 400, "Clients"),
    ("/answer", b'{"Version":"1.3","Sid":"x"}', 400, "needs Sid and Answer"),
    # 2.14.1 checks the answer's description (Tor issue 40546); 2.5.1 passed it on.
    ("/answer", b'{"Version":"1.3","Sid":"x","Answer":"v=0"}', 400,
     "malformed session description"),
    ("/answer", b'{"Version":"1.3","Sid":"x","Answer":"{\\"type\\":\\"reply\\",'
                b'\\"sdp\\":\\"v=0\\"}"}', 400, "unknown SDP type"),
    ("/answer", b'{"Version":"1.3","Sid":"x","Answer":"{\\"Type\\":\\"answer\\",'
                b'\\"sdp\\":\\"v=0\\"}"}', 400, "needs type and sdp"),
    ("/client", b"1.0\n" + b"x" * 200_000, 413, "body over"),
])
async def test_bad_input_gets_a_clear_4xx_and_the_broker_keeps_serving(
        broker, path, body, status, why):
    b, http = await broker()
    r = await http.post(path, data=body)
    assert r.status == status
    assert why in json.loads(await r.read())["error"]
    assert r.headers["Access-Control-Allow-Origin"] == "*"
    r = await http.get("/debug")
    assert r.status == 200 and (await r.text()).startswith("current snowflakes available: 0")


@pytest.mark.parametrize("body, why", [
    (b"2.0\n{}", "unsupported message version"),
    (b'1.0\n{"offer":""}', "no offer"),
    (b'1.0\n{"offer":"x","fingerprint":"zz"}', "fingerprint"),
    (b'1.0\n{"offer":"x","fingerprint":"' + b"00" * 20 + b'"}', m.ERR_UNKNOWN_BRIDGE),
    (b'1.0\n{"offer":"x"}', "malformed session description"),
    (b'1.0\n{"offer":"{\\"type\\":\\"answer\\",\\"sdp\\":\\"v=0\\"}"}',
     "type is not 'offer'"),
    (b'1.0\n{"offer":"{\\"type\\":\\"offer\\",\\"sdp\\":\\"hello\\"}"}',
     "must start with 'v=0'"),
])
async def test_a_client_poll_the_broker_cannot_use_is_a_200_with_the_reason_as_tors(
        broker, body, why):
    """Tor's broker (2.5.1 and 2.14.1) answers these 200 with ``{"error": reason}``;
    2.5.1 alone sent a bare 500 for an unknown bridge."""
    b, http = await broker()
    r = await http.post("/client", data=body)
    assert r.status == 200 and r.headers["Access-Control-Allow-Origin"] == "*"
    got = m.ClientPollResponse.decode(await r.read())
    assert why in got.error and not got.answer
    assert b.stats.bad_requests == 1 and b.stats.client_polls == 0


async def test_debug_page_is_tors_text_line_for_line(broker):
    b, http = await broker(proxy_timeout_s=5)
    polls = [asyncio.create_task(proxy_poll(http, poll("a", "unrestricted"))),
             asyncio.create_task(proxy_poll(http, m.ProxyPoll(
                 "b", "someones-own", "unknown", 0, "^snowflake.lab$").encode()))]
    await waiting(b, 2)
    r = await http.get("/debug")
    assert await r.text() == ("current snowflakes available: 2\n"
                              "\tstandalone proxies: 1\n"
                              "\tunknown proxies: 1\n"
                              "NAT Types available:\n"
                              "\trestricted: 0\n"
                              "\tunrestricted: 1\n"
                              "\tunknown: 1")
    for t in polls:
        t.cancel()


async def test_legacy_client_poll_and_cors_preflight(broker):
    b, http = await broker()
    r = await http.post("/client", data=OFFER.encode(), headers={"Snowflake-NAT-Type": "unknown"})
    assert r.status == 503
    r = await http.options("/client")
    assert r.status == 200 and r.headers["Access-Control-Allow-Headers"] == "Origin, X-Session-ID"
    r = await http.get("/robots.txt")
    assert await r.text() == "User-agent: *\nDisallow: /\n"


async def test_amp_rendezvous(broker):
    b, http = await broker()
    proxy = asyncio.create_task(proxy_poll(http, poll("amp")))
    await waiting(b, 1)
    path = amp.client_path(m.ClientPoll(OFFER, "restricted", FP).encode())
    page = asyncio.create_task(http.get(path))
    assert (await proxy).status == m.STATUS_MATCH
    await http.post("/answer", data=m.AnswerRequest("amp", ANSWER).encode())
    r = await page
    assert r.status == 200 and r.headers["Content-Type"].startswith("text/html")
    assert r.headers["Cache-Control"] == "max-age=15"
    assert m.ClientPollResponse.decode(amp.decode(await r.read())).answer == ANSWER
    r = await http.get("/amp/client/0abc/%%%")
    assert json.loads(amp.decode(await r.read())) == {"error": "cannot decode URL path"}


def test_amp_armour_splits_into_32_character_chunks():
    payload = json.dumps({"answer": "x" * 5000}).encode()
    page = amp.encode(payload).decode()
    body = page[page.index("<pre>") + 5:page.index("</pre>")].split()
    assert body[0].startswith("0") and all(len(c) == 32 for c in body[:-1])
    assert amp.decode(page.encode()) == payload
    with pytest.raises(amp.AmpError):
        amp.decode(b"<html><pre>1abc</pre></html>")


async def test_per_source_rate_limit_trusts_only_the_edge(broker):
    b, http = await broker(rate_per_s=0.001, burst=2, proxy_timeout_s=0.01,
                           trusted_edges=("127.0.0.1",))
    # Behind the trusted edge every client has its own bucket.
    for i in range(2):
        for _ in range(2):
            r = await http.post("/proxy", data=poll("s"),
                                headers={"X-Forwarded-For": f"198.18.0.{i + 2}"})
            assert r.status == 200
    r = await http.post("/proxy", data=poll("s"), headers={"X-Forwarded-For": "198.18.0.2"})
    assert r.status == 429 and "Retry-After" in r.headers
    assert json.loads(await r.read()) == {"error": "rate limited"}
    # Not from a trusted edge: the header is ignored and the peer is charged.
    b2, http2 = await broker(rate_per_s=0.001, burst=2, proxy_timeout_s=0.01)
    codes = [(await http2.post("/proxy", data=poll("s"),
                               headers={"X-Forwarded-For": f"198.18.1.{i}"})).status
             for i in range(3)]
    assert codes == [200, 200, 429]
    assert (await http2.get("/debug")).status == 200  # GETs are not limited


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(["/proxy", "/answer", "/client"]),
       body=st.one_of(st.binary(max_size=300), st.just(b"1.0\n") | st.binary(max_size=50),
                      st.builds(lambda d: json.dumps(d).encode(), st.dictionaries(
                          st.sampled_from(["Sid", "Version", "NAT", "Clients", "Type", "Answer",
                                           "AcceptedRelayPattern", "offer", "nat"]),
                          st.one_of(st.text(max_size=10), st.integers(), st.none(),
                                    st.booleans(), st.floats(allow_nan=False))))))
def test_fuzzed_bodies_never_break_the_broker(path, body):
    async def run() -> None:
        b = Broker(config(proxy_timeout_s=0.01, client_timeout_s=0.01))
        async with TestClient(TestServer(b.app())) as http:
            r = await http.post(path, data=body)
            # 503: a legacy (raw-offer) poll with no proxy waiting, as in Tor's broker.
            assert r.status in (200, 400, 413, 503)
            if r.status == 400:
                assert json.loads(await r.read())["error"]
            r = await http.get("/debug")
            assert r.status == 200

    asyncio.run(run())


@settings(max_examples=40, deadline=None)
@given(st.text(max_size=60))
def test_fuzzed_amp_paths_get_an_amp_page(path):
    async def run() -> None:
        b = Broker(config(client_timeout_s=0.01))
        async with TestClient(TestServer(b.app())) as http:
            r = await http.get("/amp/client/" + path.replace("?", "").replace("#", ""))
            assert r.status in (200, 404)
            if r.status == 200:
                assert json.loads(amp.decode(await r.read()))

    asyncio.run(run())


async def test_an_offer_taken_as_the_poll_times_out_still_reaches_the_proxy(broker, monkeypatch):
    """The race the 1,000-proxy benchmark found: a client takes a proxy in the same
    loop iteration as that proxy's long-poll timer fires."""
    import broker.app as app_module

    b, http = await broker()

    async def timeout_after_match(fut, timeout):
        sf = b.pools.match("restricted")
        assert sf is not None
        sf.offer.set_result(app_module.ClientOffer(OFFER, "restricted", FP))
        raise TimeoutError

    monkeypatch.setattr(app_module.asyncio, "wait_for", timeout_after_match)
    got = await proxy_poll(http, poll("racy"))
    assert got.status == m.STATUS_MATCH and got.offer == OFFER


async def test_ties_go_to_the_newest_poll(broker):
    b, http = await broker()
    old = asyncio.create_task(proxy_poll(http, poll("old")))
    await waiting(b, 1)
    new = asyncio.create_task(proxy_poll(http, poll("new")))
    await waiting(b, 2)
    client = asyncio.create_task(client_poll(http))
    assert (await new).status == m.STATUS_MATCH
    assert (await old).status == m.STATUS_NO_MATCH
    client.cancel()


async def test_metrics_are_published_per_period_with_noise_and_a_budget(broker):
    import random
    from fractions import Fraction

    from broker.app import MetricsConfig
    from broker.dpmetrics import BudgetExceeded
    from broker.labgeo import LabGeoIP

    geo = LabGeoIP({"127.0.0.0/8": "IR"})
    b, http = await broker(proxy_timeout_s=0.01, metrics=MetricsConfig(
        epsilon=Fraction(1, 2), budget=Fraction(1), geoip=geo))
    assert (await http.get("/metrics")).status == 404  # nothing released yet
    for _ in range(3):  # one source address: clamped to one contribution
        await proxy_poll(http, poll("p"))
    assert b.period_hist["proxy"].counts == {"IR": 1} and b.period_hist["proxy"].clamped == 2
    out = b.publish(random.Random(5))
    assert set(out["proxy_polls_by_country"]) == {"IR", "??"}
    assert all(v >= 0 for v in out["client_polls_by_country"].values())
    r = await http.get("/metrics")
    body = json.loads(await r.read())
    assert body["guarantee"].startswith("Each day release is 0.5-differentially private")
    # A fresh period has a fresh ledger; one with too small a budget publishes nothing.
    b.config.metrics.budget = Fraction(1, 2)
    b.new_period()
    with pytest.raises(BudgetExceeded):
        b.publish(random.Random(6))
    assert json.loads(await (await http.get("/metrics")).read()) == body


def test_a_bad_http_limit_on_the_command_line_is_refused_in_one_line(capsys):
    from broker.__main__ import main

    assert main(["--disable-tls", "--addr", "127.0.0.1:8", "--http-max-connections", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "broker: http-max-connections must be a positive whole number, not '0'"
