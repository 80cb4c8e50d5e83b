"""Registrations: Conjure's wire format, the station's checks, replay refusal, and
lifetimes on an injectable clock."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transports.conjure import signalling as sig
from transports.conjure.phantom import PhantomConfig, SubnetGroup, derive_keys, select_phantom
from transports.conjure.registration import (
    RegistrationError,
    Registry,
    build_registration,
    new_secret,
)

CONFIG = PhantomConfig([SubnetGroup.parse(1, ["198.18.200.128/25", "2001:db8:200::/64"],
                                          randomize_dst_port=True)])
GEN = 7


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def registry(clock=None, **kw) -> Registry:
    blocked = {"127.0.0.1", "10.0.0.1"}
    return Registry(CONFIG, GEN, covert_blocked=lambda h: h in blocked,
                    **({"clock": clock} if clock else {}), **kw)


def test_the_wire_format_is_conjures():
    secret = bytes(range(32))
    data = build_registration(secret, "min", "198.18.7.2:80", GEN)
    w = sig.C2SWrapper.FromString(data)
    assert w.shared_secret == secret and w.registration_source == 2  # API
    c2s = w.registration_payload
    assert (c2s.client_lib_version, c2s.transport, c2s.covert_address, c2s.v4_support,
            c2s.decoy_list_generation) == (4, 1, "198.18.7.2:80", True, GEN)
    assert c2s.transport_params.type_url == ""
    # Field numbers as in signalling.proto: shared_secret 1, payload 3, source 4.
    assert data[0] == 0x0A and data[1] == 32 and data[34] == 0x1A


def test_station_and_client_derive_the_same_phantom():
    r = registry()
    secret = new_secret()
    reg = r.register(build_registration(secret, "min", "198.18.7.2:80", GEN, v6=True),
                     "198.18.0.1")
    seed = derive_keys(secret).seed
    assert [p.address for p in reg.phantoms] == [
        select_phantom(seed, CONFIG, False).address, select_phantom(seed, CONFIG, True).address]
    assert reg.phantoms[0].address in ipaddress.ip_network("198.18.200.128/25")
    assert reg.port == 443  # not asked to randomize
    v4 = str(reg.phantoms[0].address)
    assert r.lookup("198.18.0.1", v4, 443) == [reg]
    assert r.lookup("198.18.0.99", v4, 443) == []  # IPv4: only the registering client
    assert r.lookup("198.18.0.99", str(reg.phantoms[1].address), 443) == [reg]  # IPv6: any


def test_randomized_ports_and_prefix_parameters_travel():
    r = registry()
    reg = r.register(build_registration(new_secret(), "prefix", "198.18.7.2:80", GEN,
                                        randomize_port=True, prefix_id=9), "198.18.0.1")
    assert 1024 <= reg.port < 65535 and reg.prefix_id == 9 and reg.randomize_port


def test_an_ipv4_phantom_needs_an_ipv4_registration():
    r = registry()
    with pytest.raises(RegistrationError, match="IPv4 phantom needs"):
        r.register(build_registration(new_secret(), "min", "198.18.7.2:80", GEN), "2001:db8::1")
    reg = r.register(build_registration(new_secret(), "min", "198.18.7.2:80", GEN, v4=False,
                                        v6=True), "2001:db8::1")
    assert [p.address.version for p in reg.phantoms] == [6]


def test_replays_are_refused_from_any_address():
    r = registry()
    data = build_registration(new_secret(), "obfs4", "198.18.7.2:80", GEN)
    r.register(data, "198.18.0.1")
    for source in ("198.18.0.1", "198.18.0.2"):
        with pytest.raises(RegistrationError, match="replayed"):
            r.register(data, source)


@pytest.mark.parametrize("mutate, msg", [
    (lambda w: setattr(w, "shared_secret", b"short"), "32 bytes"),
    (lambda w: w.ClearField("registration_payload"), "no registration payload"),
    (lambda w: setattr(w.registration_payload, "client_lib_version", 1), "version 1"),
    (lambda w: setattr(w.registration_payload, "decoy_list_generation", 3), "generation 3"),
    (lambda w: setattr(w.registration_payload, "transport", 3), "unsupported transport 3"),
    (lambda w: setattr(w.registration_payload, "covert_address", "a:b:c"), "exactly one"),
    (lambda w: setattr(w.registration_payload, "covert_address", "web:0"), "bad covert"),
    (lambda w: setattr(w.registration_payload, "covert_address", "127.0.0.1:80"), "not allowed"),
])
def test_forged_or_bad_registrations_are_refused(mutate, msg):
    w = sig.C2SWrapper.FromString(build_registration(new_secret(), "min", "198.18.7.2:80", GEN))
    mutate(w)
    with pytest.raises(RegistrationError, match=msg):
        registry().register(w.SerializeToString(), "198.18.0.1")


def test_lifetimes_follow_the_clock():
    clock = Clock()
    r = registry(clock, unused_timeout_s=600, active_timeout_s=6 * 3600)
    unused = r.register(build_registration(new_secret(), "min", "198.18.7.2:80", GEN),
                        "198.18.0.1")
    used = r.register(build_registration(new_secret(), "min", "198.18.7.2:80", GEN),
                      "198.18.0.2")
    clock.now += 300
    r.mark_used(used)
    clock.now += 301  # 601 s after registering
    assert r.expire() == [unused]
    assert r.lookup("198.18.0.1", str(unused.phantoms[0].address), 443) == []
    assert r.lookup("198.18.0.2", str(used.phantoms[0].address), 443) == [used]
    clock.now += 6 * 3600 - 301  # 6 h after its first use
    assert r.expire() == [used] and list(r) == []


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=600))
def test_fuzzed_registrations_are_refused_cleanly(data):
    try:
        registry().register(data, "198.18.0.1")
    except RegistrationError:
        pass
