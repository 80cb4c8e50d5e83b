"""client_ip from an offer, and local candidates stripped from an answer
(docs/transports/snowflake.md §3.3–§3.4)."""

from __future__ import annotations

from transports.snowflake.sdputil import client_ip, strip_local_candidates

OFFER = ("v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\nc=IN IP4 0.0.0.0\r\n"
         "a=candidate:1 1 udp 2130706431 10.9.0.2 35921 typ host\r\n"
         "a=candidate:2 1 udp 2130706431 198.18.0.2 59810 typ host\r\n"
         "a=candidate:3 1 udp 2130706431 198.51.100.7 40000 typ srflx raddr 0.0.0.0 rport 0\r\n")


def test_the_first_non_local_candidate_is_the_client_ip():
    assert client_ip(OFFER) == "198.18.0.2"  # the lab range is not local


def test_falls_back_to_the_connection_line_then_none():
    assert client_ip("v=0\r\nc=IN IP4 203.0.113.9\r\n") == "203.0.113.9"
    assert client_ip("v=0\r\nc=IN IP4 0.0.0.0\r\n"
                     "a=candidate:1 1 udp 1 192.168.1.2 9 typ host\r\n") is None
    assert client_ip("a=candidate:1 1 udp 1 abcd.local 9 typ host\r\n") is None


def test_local_candidates_are_stripped_and_line_endings_kept():
    out = strip_local_candidates(OFFER)
    assert "10.9.0.2" not in out and "198.18.0.2" in out and "198.51.100.7" in out
    assert out.startswith("v=0\r\n") and out.endswith("\r\n")
    v6 = ("a=candidate:1 1 udp 1 fe80::1 9 typ host\r\n"
          "a=candidate:2 1 udp 1 2001:db8::2 9 typ host\r\n")
    assert strip_local_candidates(v6) == "a=candidate:2 1 udp 1 2001:db8::2 9 typ host\r\n"
