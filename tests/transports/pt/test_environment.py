"""Managed-mode environment: parsing rules, and the exact stdout lines for bad ones."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ptadapter import str_utils

from transports.pt import environment as envmod
from transports.pt.environment import ClientConfig, PTEnvError, ServerConfig

BASE = {"TOR_PT_MANAGED_TRANSPORT_VER": "1", "TOR_PT_STATE_LOCATION": "/tmp/ptlab-state"}


def test_client_config():
    cfg = envmod.parse({**BASE, "TOR_PT_CLIENT_TRANSPORTS": "obfs4,direct,obfs4",
                        "TOR_PT_EXIT_ON_STDIN_CLOSE": "1",
                        "TOR_PT_OUTBOUND_BIND_ADDRESS_V4": "198.18.0.5",
                        "TOR_PT_OUTBOUND_BIND_ADDRESS_V6": "[2001:db8::5]"})
    assert isinstance(cfg, ClientConfig)
    assert cfg.transports == ["obfs4", "direct"]
    assert cfg.state_location == Path("/tmp/ptlab-state")
    assert cfg.exit_on_stdin_close and cfg.proxy is None
    assert (cfg.outbound_bind_v4, cfg.outbound_bind_v6) == ("198.18.0.5", "2001:db8::5")


def test_server_config():
    cfg = envmod.parse({
        **BASE,
        "TOR_PT_SERVER_TRANSPORTS": "obfs4,direct",
        "TOR_PT_SERVER_BINDADDR": "obfs4-198.18.1.2:443,direct-[::1]:0",
        "TOR_PT_SERVER_TRANSPORT_OPTIONS": r"obfs4:cert=a\;b\:c\\d;obfs4:iat-mode=1;direct:k=v=w",
        "TOR_PT_ORPORT": "127.0.0.1:9001",
        "TOR_PT_EXTENDED_SERVER_PORT": "127.0.0.1:9002",
        "TOR_PT_AUTH_COOKIE_FILE": "/tmp/cookie",
    })
    assert isinstance(cfg, ServerConfig)
    assert cfg.bindaddrs == {"obfs4": ("198.18.1.2", 443), "direct": ("::1", 0)}
    assert cfg.options == {"obfs4": {"cert": "a;b:c\\d", "iat-mode": "1"},
                           "direct": {"k": "v=w"}}
    assert cfg.orport == ("127.0.0.1", 9001) and cfg.ext_orport == ("127.0.0.1", 9002)
    assert cfg.auth_cookie_file == Path("/tmp/cookie") and not cfg.exit_on_stdin_close


def test_empty_extended_port_means_none():
    cfg = envmod.parse({**BASE, "TOR_PT_SERVER_TRANSPORTS": "direct",
                        "TOR_PT_ORPORT": "127.0.0.1:9001", "TOR_PT_EXTENDED_SERVER_PORT": ""})
    assert cfg.ext_orport is None and cfg.bindaddrs == {}


_OPT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"),
               min_size=1, max_size=12)


@given(st.dictionaries(_OPT.filter(lambda k: "=" not in k), _OPT, min_size=1, max_size=4))
def test_server_options_round_trip_with_ptadapter_escaping(opts):
    # ptadapter escapes exactly as tor does (":", ";" and "\" get a backslash).
    raw = ";".join(f"obfs4:{str_utils.escape_server_options(k)}="
                   f"{str_utils.escape_server_options(v)}" for k, v in opts.items())
    assert envmod.parse_server_options(raw) == {"obfs4": opts}


def test_version_negotiation():
    assert envmod.check_version({"TOR_PT_MANAGED_TRANSPORT_VER": "2,1,x"}) == "1"
    with pytest.raises(envmod.VersionError) as e:
        envmod.check_version({"TOR_PT_MANAGED_TRANSPORT_VER": "2"})
    assert e.value.line() == "VERSION-ERROR no-version"


@pytest.mark.parametrize("extra, fragment", [
    ({"TOR_PT_STATE_LOCATION": ""}, "no TOR_PT_STATE_LOCATION"),
    ({}, "neither"),
    ({"TOR_PT_CLIENT_TRANSPORTS": "a", "TOR_PT_SERVER_TRANSPORTS": "a"}, "both set"),
    ({"TOR_PT_SERVER_TRANSPORTS": "direct"}, "need TOR_PT_ORPORT"),
    ({"TOR_PT_SERVER_TRANSPORTS": "direct", "TOR_PT_EXTENDED_SERVER_PORT": "127.0.0.1:1"},
     "TOR_PT_AUTH_COOKIE_FILE"),
    ({"TOR_PT_SERVER_TRANSPORTS": "direct", "TOR_PT_ORPORT": "::1:9001"}, "brackets"),
    ({"TOR_PT_SERVER_TRANSPORTS": "direct", "TOR_PT_ORPORT": "127.0.0.1:0"}, "bad port"),
    ({"TOR_PT_SERVER_TRANSPORTS": "direct", "TOR_PT_ORPORT": "127.0.0.1:1",
      "TOR_PT_SERVER_BINDADDR": "direct-bridge.lab:443"}, "not an IP"),
    ({"TOR_PT_SERVER_TRANSPORTS": "direct", "TOR_PT_ORPORT": "127.0.0.1:1",
      "TOR_PT_SERVER_BINDADDR": "direct127.0.0.1:443"}, "bad entry"),
    ({"TOR_PT_SERVER_TRANSPORTS": "direct", "TOR_PT_ORPORT": "127.0.0.1:1",
      "TOR_PT_SERVER_TRANSPORT_OPTIONS": "direct-k=v"}, "no ':'"),
    ({"TOR_PT_SERVER_TRANSPORTS": "direct", "TOR_PT_ORPORT": "127.0.0.1:1",
      "TOR_PT_SERVER_TRANSPORT_OPTIONS": "direct:kv"}, "no key=value"),
    ({"TOR_PT_SERVER_TRANSPORTS": "direct", "TOR_PT_ORPORT": "127.0.0.1:1",
      "TOR_PT_SERVER_TRANSPORT_OPTIONS": "direct:k=v\\"}, "dangling backslash"),
    ({"TOR_PT_CLIENT_TRANSPORTS": "direct", "TOR_PT_OUTBOUND_BIND_ADDRESS_V4": "::1"}, "IPv4"),
])
def test_env_errors(extra, fragment):
    with pytest.raises(PTEnvError) as e:
        envmod.parse({**BASE, **extra})
    assert e.value.line().startswith("ENV-ERROR ") and fragment in e.value.line()


def test_missing_version_is_env_error():
    with pytest.raises(PTEnvError) as e:
        envmod.parse({"TOR_PT_STATE_LOCATION": "/x", "TOR_PT_CLIENT_TRANSPORTS": "direct"})
    assert e.value.line() == "ENV-ERROR no TOR_PT_MANAGED_TRANSPORT_VER environment variable"


def test_proxy():
    p = envmod.parse_proxy("socks5://us%3Ar:p%40ss@127.0.0.1:1080")
    assert (p.scheme, p.host, p.port, p.username, p.password) == \
        ("socks5", "127.0.0.1", 1080, "us:r", "p@ss")
    assert envmod.parse_proxy("http://[::1]:3128").host == "::1"
    for bad in ("ftp://127.0.0.1:21", "socks5://127.0.0.1", "socks5://proxy.lab:1080",
                "socks5://127.0.0.1:99999"):
        with pytest.raises(envmod.ProxyError) as e:
            envmod.parse_proxy(bad)
        assert e.value.line().startswith("PROXY-ERROR ")


# The same errors as the parent sees them: run the real entry point.

def run_pt(env: dict[str, str], stdin_data: bytes = b"") -> tuple[int, list[str]]:
    full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env}
    p = subprocess.run([sys.executable, "-m", "transports.pt"], env=full, input=stdin_data,
                       capture_output=True, timeout=20)
    return p.returncode, p.stdout.decode("ascii").splitlines()


def test_subprocess_error_lines(tmp_path):
    state = str(tmp_path / "state")
    rc, out = run_pt({})
    assert rc == 1 and out == ["ENV-ERROR no TOR_PT_MANAGED_TRANSPORT_VER environment variable"]

    rc, out = run_pt({"TOR_PT_MANAGED_TRANSPORT_VER": "2", "TOR_PT_STATE_LOCATION": state,
                      "TOR_PT_CLIENT_TRANSPORTS": "direct"})
    assert rc == 1 and out == ["VERSION-ERROR no-version"]

    rc, out = run_pt({"TOR_PT_MANAGED_TRANSPORT_VER": "1", "TOR_PT_CLIENT_TRANSPORTS": "direct"})
    assert rc == 1 and out == ["VERSION 1",
                               "ENV-ERROR no TOR_PT_STATE_LOCATION environment variable"]

    rc, out = run_pt({"TOR_PT_MANAGED_TRANSPORT_VER": "1", "TOR_PT_STATE_LOCATION": state,
                      "TOR_PT_SERVER_TRANSPORTS": "direct"})
    assert rc == 1 and out[0] == "VERSION 1" and out[1].startswith("ENV-ERROR need TOR_PT_ORPORT")

    rc, out = run_pt({"TOR_PT_MANAGED_TRANSPORT_VER": "1", "TOR_PT_STATE_LOCATION": state,
                      "TOR_PT_CLIENT_TRANSPORTS": "direct",
                      "TOR_PT_PROXY": "socks5://127.0.0.1:9"})
    assert rc == 1 and out[0] == "VERSION 1" and out[1].startswith("PROXY-ERROR ")
    assert len(out) == 2  # no CMETHOD after a PROXY-ERROR


def test_subprocess_unknown_transport_and_busy_bindaddr(tmp_path):
    state = str(tmp_path / "state")
    rc, out = run_pt({"TOR_PT_MANAGED_TRANSPORT_VER": "1", "TOR_PT_STATE_LOCATION": state,
                      "TOR_PT_CLIENT_TRANSPORTS": "no_such_pt"})
    # The spec says to ignore names we do not know; we only LOG them.
    assert rc == 1 and out[0] == "VERSION 1" and "CMETHODS DONE" in out
    assert not any(line.startswith(("CMETHOD ", "CMETHOD-ERROR")) for line in out)
    assert any(line.startswith("LOG SEVERITY=warning") and "no_such_pt" in line for line in out)
    assert (tmp_path / "state").is_dir()  # the PT creates its state directory

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        rc, out = run_pt({"TOR_PT_MANAGED_TRANSPORT_VER": "1", "TOR_PT_STATE_LOCATION": state,
                          "TOR_PT_SERVER_TRANSPORTS": "direct",
                          "TOR_PT_SERVER_BINDADDR": f"direct-127.0.0.1:{port}",
                          "TOR_PT_ORPORT": "127.0.0.1:9"})
    assert rc == 1
    # A server first logs its descriptor budget (a LOG line may come anywhere).
    assert any(line.startswith("LOG SEVERITY=notice") and "descriptor budget" in line
               for line in out)
    methods = [line for line in out if not line.startswith("LOG ")]
    assert methods[0] == "VERSION 1" and methods[1].startswith("SMETHOD-ERROR direct cannot listen")
    assert "SMETHODS DONE" in out
