"""Bridge-line arguments: what each one sets, what is refused, and servername= rotation."""

from __future__ import annotations

import base64

import pytest

from transports.base import TransportError
from transports.webtunnel.args import ClientArgs, ServerNameRotation


def parse(**kw: str) -> ClientArgs:
    return ClientArgs.parse({k.replace("_", "-"): v for k, v in kw.items()})


def test_https_url_defaults():
    a = parse(url="https://Bridge.Example:8443/s3cret?x=1#f", ver="0.0.3")
    assert a.tls
    assert (a.dial_host, a.dial_port) == ("Bridge.Example", 8443)
    assert a.host_header == "Bridge.Example"  # no port, case kept (as Go's Hostname)
    assert a.target == "/s3cret"
    assert a.server_names == ("Bridge.Example",)
    assert a.verify_name is None and a.pin is None


def test_http_url_defaults():
    a = parse(url="http://bridge.example")
    assert not a.tls
    assert (a.dial_port, a.target) == (80, "/")


def test_an_empty_port_means_the_default():
    assert parse(url="https://bridge.example:/x").dial_port == 443


def test_ipv6_url_host():
    a = parse(url="https://[2001:db8::1]:444/p")
    assert (a.dial_host, a.dial_port, a.host_header) == ("2001:db8::1", 444, "2001:db8::1")


def test_addr_replaces_the_dial_address_only():
    a = parse(url="https://bridge.example/p", addr="[2001:db8::7]:9443")
    assert (a.dial_host, a.dial_port) == ("2001:db8::7", 9443)
    assert (a.host_header, a.server_names) == ("bridge.example", ("bridge.example",))


def test_sni_imitation_sends_another_name_and_checks_the_urls():
    a = parse(url="https://bridge.example/p", sni_imitation="www.cover.example")
    assert a.server_names == ("www.cover.example",)
    assert a.verify_name == "bridge.example"
    assert a.host_header == "bridge.example"


def test_servername_overrides_sni_imitation():
    a = parse(url="https://bridge.example/p", sni_imitation="cover.example",
              servername="one.example, two.example")
    assert a.server_names == ("one.example", "two.example")
    assert a.verify_name == "bridge.example"


def test_cert_domain_names_the_certificate_to_expect():
    a = parse(url="https://bridge.example/p", servername="cover.example",
              cert_domain="cdn.example")
    assert (a.server_names, a.verify_name) == (("cover.example",), "cdn.example")


def test_cert_is_the_decoded_chain_hash():
    pin = bytes(range(32))
    assert parse(url="https://b.example/", cert=base64.b64encode(pin).decode()).pin == pin


@pytest.mark.parametrize("utls", ["", "none", "NONE"])
def test_utls_none_or_absent_is_python_ssl(utls):
    assert parse(url="https://b.example/", utls=utls).tls


@pytest.mark.parametrize(("args", "message"), [
    ({}, "missing argument 'url'"),
    ({"url": ""}, "missing argument 'url'"),
    ({"url": "ftp://b.example/"}, "scheme must be https or http, not 'ftp'"),
    ({"url": "b.example/path"}, "scheme must be https or http"),
    ({"url": "wss://b.example/"}, "not 'wss'"),
    ({"url": "https:///path"}, "no host"),
    ({"url": "https://b.example/a b"}, "spaces or control"),
    ({"url": "https://b.example/%zz"}, "invalid %-escape"),
    ({"url": "https://bücher.example/"}, "xn--"),
    ({"url": "https://b.example:70000/"}, "out of range"),
    ({"url": "https://b.example/", "addr": "nowhere"}, "addr"),
    ({"url": "https://b.example/", "cert": "not base64!"}, "certificate chain hash"),
    ({"url": "https://b.example/", "servername": " , "}, "servername"),
])
def test_bad_arguments_are_refused_in_one_line(args, message):
    with pytest.raises(TransportError, match=message) as caught:
        ClientArgs.parse(args)
    assert "\n" not in str(caught.value)
    assert str(caught.value).startswith("webtunnel: ")


@pytest.mark.parametrize("utls", ["hellorandomizednoalpn", "HelloChrome_Auto", "firefox"])
def test_a_utls_fingerprint_is_refused_naming_the_value(utls):
    with pytest.raises(TransportError) as caught:
        parse(url="https://b.example/", utls=utls)
    message = str(caught.value)
    assert f"utls={utls} is not supported" in message
    assert "utls=none" in message and "\n" not in message


# --- servername= rotation ----------------------------------------------------------------

def test_rotation_starts_where_the_random_says_and_moves_on_failure():
    rotation = ServerNameRotation(("a", "b", "c"), randrange=lambda n: 2)
    assert rotation.current() == "c"
    assert rotation.current() == "c"  # kept while it works
    rotation.failed()
    assert rotation.current() == "a"  # wraps round
    rotation.failed()
    assert rotation.current() == "b"


def test_the_random_start_covers_the_list():
    starts = {ServerNameRotation(("a", "b", "c"), randrange=lambda n, i=i: i).current()
              for i in range(3)}
    assert starts == {"a", "b", "c"}
