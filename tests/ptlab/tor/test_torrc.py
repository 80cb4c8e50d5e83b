"""torrc rendering and key generation for the private Tor network."""

from __future__ import annotations

import re
import shutil

import pytest

from ptlab.tor import keys, torrc
from ptlab.tor.torrc import TorNode


def auth(i: int) -> TorNode:
    return TorNode(f"auth{i}", "authority", "tornet", "198.18.9.2", f"/d/auth{i}", 5000 + i,
                   7000 + i, fingerprint="A" * 40, v3ident="B" * 40)


def test_voting_schedule_meets_tors_rules():
    # tor(1): the initial interval divides 30 minutes, delays are at least 2 s and add
    # up to less than it; later, at least 10 s, delays under half the interval.
    assert 1800 % torrc.INITIAL_VOTING_INTERVAL == 0
    assert min(torrc.INITIAL_VOTE_DELAY, torrc.INITIAL_DIST_DELAY) >= 2
    assert torrc.INITIAL_VOTE_DELAY + torrc.INITIAL_DIST_DELAY < torrc.INITIAL_VOTING_INTERVAL
    assert torrc.VOTING_INTERVAL >= 10
    assert torrc.VOTE_DELAY + torrc.DIST_DELAY < torrc.VOTING_INTERVAL / 2


def test_every_node_lists_every_authority_and_nothing_public():
    auths = [auth(i) for i in range(3)]
    client = TorNode("client", "client", "client", "127.0.0.1", "/d/c", socksport=9050,
                     controlport=9051, extra=["UseBridges 1"])
    for node in [*auths, client]:
        text = torrc.render(node, auths)
        lines = text.splitlines()
        assert "TestingTorNetwork 1" in lines and "Sandbox 0" in lines
        assert sum(ln.startswith("DirAuthority ") for ln in lines) == 3
        assert "DirAuthority auth1 orport=5001 no-v2 v3ident=" + "B" * 40 + \
            " 198.18.9.2:7001 " + "A" * 40 in lines
    a = torrc.render(auths[0], auths).splitlines()
    assert "AuthoritativeDirectory 1" in a and "V3AuthoritativeDirectory 1" in a
    assert "DirPort 198.18.9.2:7000" in a and "ORPort 198.18.9.2:5000" in a
    c = torrc.render(client, auths).splitlines()
    assert "SocksPort 127.0.0.1:9050" in c and "ControlPort 127.0.0.1:9051" in c
    assert c[-1] == "UseBridges 1" and not any(ln.startswith("ORPort") for ln in c)


def test_bridges_do_not_publish_and_relays_exit():
    bridge = TorNode("bridge", "bridge", "bridge", "198.18.5.2", "/d/b", 5200)
    b = torrc.render(bridge, [auth(0)]).splitlines()
    assert {"BridgeRelay 1", "PublishServerDescriptor 0", "ExitRelay 0"} <= set(b)
    relay = TorNode("exit0", "relay", "tornet", "198.18.9.2", "/d/e", 5100, 7100)
    r = torrc.render(relay, [auth(0)]).splitlines()
    assert {"ExitRelay 1", "ExitPolicy accept *:*", "ExitPolicyRejectPrivate 0"} <= set(r)


def test_an_authority_line_needs_keys():
    with pytest.raises(ValueError):
        TorNode("a", "authority", "tornet", "1.2.3.4", "/d", 1, 2).authority_line()
    with pytest.raises(ValueError):
        TorNode("r", "relay", "tornet", "1.2.3.4", "/d", 1, 2, fingerprint="A" * 40,
                v3ident="B" * 40).authority_line()


@pytest.mark.skipif(not shutil.which("tor-gencert"), reason="tor is not installed")
def test_keys_from_tors_own_tools(tmp_path):
    v3 = keys.authority_keys(tmp_path / "a", "198.18.9.2", 7000)
    fp = keys.relay_fingerprint(tmp_path / "a")
    assert re.fullmatch(r"[0-9A-F]{40}", v3) and re.fullmatch(r"[0-9A-F]{40}", fp)
    assert v3 != fp  # the v3 authority key is not the relay identity
    # Both are kept: asking again gives the same answers.
    assert keys.authority_keys(tmp_path / "a", "198.18.9.2", 7000) == v3
    assert keys.relay_fingerprint(tmp_path / "a") == fp
    assert (tmp_path / "a" / "fingerprint").read_text().split()[1] == fp
