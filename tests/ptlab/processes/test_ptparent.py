"""Tor's parent role: the text ptparent writes for a PT and reads back from it
agrees with the PT side's escaping (transports.pt.escaping)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ptlab.processes.ptparent import parse_method, pt_environment
from transports.pt import environment, messages


def _server_args(options: list[str]) -> argparse.Namespace:
    return argparse.Namespace(role="server", transport="obfs4", state=Path("/tmp/ptl-state"),
                              bind="127.0.0.1:0", orport="127.0.0.1:9", option=options)


def test_server_options_reach_the_pt_as_given():
    env = pt_environment(_server_args(["cert=a;b:c\\d", "iat-mode=1", "url=http://x/?a=b"]))
    assert env["TOR_PT_SERVER_TRANSPORT_OPTIONS"] == \
        r"obfs4:cert=a\;b\:c\\d;obfs4:iat-mode=1;obfs4:url=http\://x/?a=b"
    assert environment.parse_server_options(env["TOR_PT_SERVER_TRANSPORT_OPTIONS"]) == {
        "obfs4": {"cert": "a;b:c\\d", "iat-mode": "1", "url": "http://x/?a=b"}}


def test_smethod_args_are_read_as_the_pt_wrote_them():
    args = {"cert": "AbC+/x=", "k=ey": "v,w", "tail": "ends\\"}
    line = messages.format_smethod("obfs4", "198.18.0.2", 443, args)
    assert parse_method(line) == {"kind": "server", "transport": "obfs4",
                                  "addr": "198.18.0.2:443", "args": args}


def test_client_and_other_lines():
    assert parse_method("CMETHOD obfs4 socks5 127.0.0.1:5000") == {
        "kind": "client", "transport": "obfs4", "proto": "socks5", "addr": "127.0.0.1:5000"}
    assert parse_method("SMETHOD direct 127.0.0.1:1") == {
        "kind": "server", "transport": "direct", "addr": "127.0.0.1:1", "args": {}}
    assert parse_method("SMETHODS DONE") is None
    assert parse_method("") is None


def test_an_smethod_whose_args_end_in_a_lone_backslash_is_not_a_method():
    assert parse_method("SMETHOD obfs4 127.0.0.1:1 ARGS:cert=abc\\") is None
