"""A proxy refuses relays outside its pattern, by name and by resolved address."""

from __future__ import annotations

import pytest

from transports.snowflake.relaycheck import RelayRefused, check_relay
from transports.snowflake.relaypattern import RelayPattern


def resolver(table: dict[str, list[str]]):
    async def resolve(host: str) -> list[str]:
        if host not in table:
            raise OSError("no such host")
        return table[host]
    return resolve


DNS = resolver({"snowflake.torproject.net": ["37.218.245.111"],
                "evil.snowflake.torproject.net": ["192.168.1.1"],  # in pattern, internal
                "sneaky.torproject.net": ["2001:db8::5"],
                "lab.snowflake.torproject.net": ["198.18.5.2"]})
PATTERN = "snowflake.torproject.net$"


async def test_a_public_relay_in_the_pattern_is_accepted():
    assert await check_relay("wss://snowflake.torproject.net/", PATTERN,
                             resolver=DNS) == "snowflake.torproject.net"


@pytest.mark.parametrize("url, why", [
    ("wss://evil.example/", "outside the allowed pattern"),
    ("wss://snowflake.torproject.net.evil.example/", "outside the allowed pattern"),
    ("ws://snowflake.torproject.net/", "non-TLS"),
    ("https://snowflake.torproject.net/", "ws:// or wss://"),
    ("wss:///nohost", "ws:// or wss://"),
    ("wss://snowflake.torproject.net:99999/", "malformed"),
    ("wss://evil.snowflake.torproject.net/", "resolves to an internal address"),
    ("wss://lab.snowflake.torproject.net/", "resolves to an internal address"),
    ("wss://nx.snowflake.torproject.net/", "cannot resolve"),
])
async def test_refusals_by_name_scheme_and_resolved_address(url, why):
    with pytest.raises(RelayRefused, match=why):
        await check_relay(url, PATTERN, resolver=DNS)


async def test_internal_literals_need_an_exact_pattern_or_an_explicit_flag():
    with pytest.raises(RelayRefused, match="pattern does not name it"):
        await check_relay("ws://198.18.5.2:8081/", "198.18.5.2$", allow_non_tls=True)
    assert await check_relay("ws://198.18.5.2:8081/", "^198.18.5.2$", allow_non_tls=True)
    assert await check_relay("wss://evil.snowflake.torproject.net/", PATTERN,
                             allow_private=True, resolver=DNS)
    with pytest.raises(RelayRefused, match="outside"):  # the flag never widens the name rule
        await check_relay("wss://evil.example/", PATTERN, allow_private=True)


@pytest.mark.parametrize("proxy, broker, covers", [
    ("snowflake.torproject.net$", "snowflake.torproject.net$", True),
    ("torproject.net$", "snowflake.torproject.net$", True),
    ("snowflake.torproject.net$", "torproject.net$", False),
    ("^snowflake.torproject.net$", "snowflake.torproject.net$", False),
    ("^a.lab$", "^a.lab$", True),
    ("$", "^a.lab$", True),
])
def test_superset_rule(proxy, broker, covers):
    assert RelayPattern.parse(proxy).covers(RelayPattern.parse(broker)) is covers


def test_suffix_match_has_no_dot_boundary_as_in_tor():
    assert RelayPattern.parse("torproject.net$").matches("eviltorproject.net")
    assert not RelayPattern.parse("^torproject.net$").matches("a.torproject.net")
