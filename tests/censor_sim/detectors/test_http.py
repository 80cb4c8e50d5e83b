"""HTTP request-head parsing (NeedMore contract) and GFW-style keyword matching."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from censor_sim.detectors import NeedMore, http

REQ = (b"GET /search?q=Falun HTTP/1.1\r\n"
       b"Host: WWW.Example.com:8080\r\n"
       b"User-Agent: curl/8.0 tiananmen\r\n"
       b"Accept: */*\r\n"
       b"\r\n")


def test_parse_simple_request():
    r = http.parse_request(REQ + b"body bytes")
    assert r is not None
    assert (r.method, r.target, r.path, r.version) == ("GET", "/search?q=Falun", "/search?q=Falun",
                                                       "HTTP/1.1")
    assert r.headers[0] == ("Host", "WWW.Example.com:8080")
    assert r.host == "www.example.com"
    assert r.header("user-agent") == "curl/8.0 tiananmen"
    assert r.header("cookie") is None
    assert r.head_length == len(REQ)


def test_every_strict_prefix_needs_more():
    for i in range(len(REQ)):
        with pytest.raises(NeedMore):
            http.parse_request(REQ[:i])


@pytest.mark.parametrize("junk", [
    b"\x16\x03\x01\x02\x00\x01",  # a TLS ClientHello
    b"GE\x00",
    b"GET /\x00",
    b"GET / HTTP/1.1\r\nbad header\r\n",  # complete line without a colon
    b"GET / HTTP/1.1\r\nBad Name: x\r\n",
    b"GET / HTTP/1.1\r\nHost : x\r\n",  # whitespace before the colon (RFC 9112 §5.1)
    b"GET / HTTX/1.1\r\n",
    b"GET  / HTTP/1.1\r\n",
    b"GET / HTTP/1.1 extra\r\n",
    b"A" * 40,  # no method is that long
])
def test_not_http_is_none_at_once(junk):
    assert http.parse_request(junk) is None


@pytest.mark.parametrize("bad", [
    b" GET / HTTP/1.1\r\n\r\n",
    b"GET / HTTP/1.1\r\n Host: x\r\n\r\n",  # fold before any field line
    b"\r\nGET / HTTP/1.1\r\n\r\n",
    b"GET http://[::1/ HTTP/1.1\r\n\r\n",  # broken IPv6 authority
    b"GET / HTTP/1.1\r\nH\xffst: x\r\n\r\n",
])
def test_malformed_complete_heads(bad):
    assert http.parse_request(bad) is None


def test_head_cap_16k():
    big = b"GET / HTTP/1.1\r\nX-Pad: " + b"a" * (http.MAX_HEAD - 30)
    with pytest.raises(NeedMore):
        http.parse_request(big)
    assert http.parse_request(big + b"a" * 40) is None  # 16 KiB and still no end
    done = big + b"\r\n\r\n"
    assert http.parse_request(done) is not None
    assert http.parse_request(big + b"a" * 40 + b"\r\n\r\n") is None


def test_bare_lf_and_obs_fold():
    r = http.parse_request(b"POST /x HTTP/1.0\nHost: a.example\nX-Long: one\n  two\n\nrest")
    assert r.method == "POST" and r.host == "a.example" and r.header("x-long") == "one two"
    assert r.head_length == len(b"POST /x HTTP/1.0\nHost: a.example\nX-Long: one\n  two\n\n")


def test_absolute_form_target_wins_over_host_header():
    r = http.parse_request(b"GET http://User@Blocked.Example:81/p/q?r=1 HTTP/1.1\r\n"
                           b"Host: innocent.example\r\n\r\n")
    assert r.host == "blocked.example" and r.path == "/p/q?r=1"
    r = http.parse_request(b"GET http://[2001:db8::1]:8080 HTTP/1.1\r\n\r\n")
    assert r.host == "[2001:db8::1]" and r.path == "/"
    r = http.parse_request(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
    assert r.host == "example.com" and r.path == "example.com:443"
    assert http.parse_request(b"GET / HTTP/1.1\r\n\r\n").host is None


def test_keyword_match_path_and_host_only():
    r = http.parse_request(REQ)
    assert http.keyword_match(r, ["falun"]) == ("falun", "path")  # case-insensitive
    assert http.keyword_match(r, ["EXAMPLE"]) == ("EXAMPLE", "host")
    assert http.keyword_match(r, ["tiananmen"]) is None  # only in User-Agent
    assert http.keyword_match(r, ["8080"]) is None  # the port is not part of the host
    assert http.keyword_match(r, ["example", "falun"]) == ("falun", "path")  # path first
    assert http.keyword_match(r, ["example", "falun"], where=("host", "path")) == ("example",
                                                                                  "host")
    assert http.keyword_match(r, ["falun"], where=("host",)) is None
    assert http.keyword_match(r, [b"FALUN"]) == ("FALUN", "path")
    assert http.keyword_match(r, ["", "zzz"]) is None
    assert http.keyword_match(r, []) is None
    with pytest.raises(ValueError):
        http.keyword_match(r, ["x"], where=("body",))


def get(target: bytes) -> http.HttpRequest:
    r = http.parse_request(b"GET " + target + b" HTTP/1.1\r\n\r\n")
    assert r is not None
    return r


def test_keyword_match_percent_decoding_single_pass():
    assert http.keyword_match(get(b"/%66alun"), ["falun"]) == ("falun", "path")
    assert http.keyword_match(get(b"/%46%41LUN"), ["falun"]) == ("falun", "path")
    assert http.keyword_match(get(b"/%E6%B3%95%E8%BD%AE"), ["法轮"]) == ("法轮", "path")
    assert http.keyword_match(get(b"/%2566alun"), ["falun"]) is None  # double encoding
    assert http.keyword_match(get(b"/a%20b"), ["a%20b"]) == ("a%20b", "path")  # raw too
    assert http.keyword_match(get(b"/%zz%"), ["zz"]) == ("zz", "path")  # bad escapes kept


# --------------------------------------------------------------------------- property

_token = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789-_", min_size=1,
                 max_size=12)
_value = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=30)
_path = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=40)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["GET", "POST", "HEAD", "PUT", "OPTIONS", "PATCH"]), _path,
       st.lists(st.tuples(_token, _value), max_size=6), st.booleans(), st.binary(max_size=20))
def test_roundtrip_generated_requests(method, path, headers, crlf, tail):
    eol = b"\r\n" if crlf else b"\n"
    head = f"{method} /{path} HTTP/1.1".encode() + eol
    head += b"".join(f"{k}: {v}".encode() + eol for k, v in headers) + eol
    r = http.parse_request(head + tail)
    assert r is not None
    assert r.method == method and r.target == "/" + path and r.head_length == len(head)
    assert r.headers == [(k, v) for k, v in headers]
    for i in range(0, len(head) - 1, 7):
        with pytest.raises(NeedMore):
            http.parse_request(head[:i])


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200), st.booleans())
def test_fuzz_never_raises_anything_but_needmore(data, prefix):
    stream = (b"GET / HTTP/1.1\r\n" + data) if prefix else data
    try:
        r = http.parse_request(stream)
    except NeedMore:
        return
    if r is not None:
        assert r.head_length <= len(stream)
        http.keyword_match(r, ["a", "%", "é"])
