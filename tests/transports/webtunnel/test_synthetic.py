"""The announced synthetic address and the published bridge line."""

from __future__ import annotations

import ipaddress

import pytest

from transports.webtunnel.synthetic import bridge_line, synthetic_address

URL = "https://example.com/secretpath"
FINGERPRINT = "0123456789ABCDEF0123456789ABCDEF01234567"


def test_the_known_vector():
    assert str(synthetic_address(URL)) == "2001:db8:f323:c36f:d11b:2932:6f0d:e2ab"


@pytest.mark.parametrize("url", [URL, "http://a/", "https://x.example/p?q", ""])
def test_every_address_is_in_the_documentation_prefix(url):
    address = synthetic_address(url)
    assert address in ipaddress.IPv6Network("2001:db8::/32")
    assert address != synthetic_address(url + "x")  # the url decides the rest


def test_the_bridge_line_an_operator_publishes():
    assert bridge_line(URL, FINGERPRINT.lower()) == (
        "webtunnel [2001:db8:f323:c36f:d11b:2932:6f0d:e2ab]:443 "
        f"{FINGERPRINT} url={URL} ver=0.0.3")


@pytest.mark.parametrize(("url", "fingerprint"), [
    (URL, "abc"), (URL, "Z" * 40), ("", FINGERPRINT), ("https://a/ b", FINGERPRINT)])
def test_a_bad_bridge_line_is_refused(url, fingerprint):
    with pytest.raises(ValueError):
        bridge_line(url, fingerprint)
