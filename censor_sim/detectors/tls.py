"""TLS detection: SNI matching over the ClientHello a censor reads in the clear.

Censors read the ClientHello in the clear: its server_name (SNI blocking,
the TSPU's throttling trigger), and its shape – cipher suites, extensions,
groups – which JA3 (Salesforce, 2017) and JA4 (FoxIO, 2023) condense into a
fingerprint (Iran's 2022 blocking of Go's crypto/tls hello;
docs/censors/fingerprints.md §1, §3).

The parser and the fingerprints are :mod:`ptcommon.tlshello` (transports use them
too and must not import the censor); this module holds the censor's rules over
what it parses. The stream parser raises :class:`~censor_sim.detectors.NeedMore`
(the same class as ``ptcommon.tlshello.NeedMore``) on a valid prefix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ptcommon import tlshello

from . import NeedMore

# How a censor reads a ClientHello that spans TLS records (``tls_records``):
# "reassemble" joins the records' handshake bytes, as a TLS stack does; "first"
# reads the first record alone and leaves a hello that goes on in a second record
# unparsed; "first-prefix" reads what the first record holds of the hello and
# matches an SNI extension wholly inside it. Wu et al. (IEEE S&P 2025, §4.3,
# Table III) found that neither the GFW nor the Henan firewall reassembles TLS
# records; which of the last two readings is theirs is not stated
# (docs/censors/blocking.md §5.2).
TLS_RECORDS = ("reassemble", "first", "first-prefix")


def sni_matches(sni: str | None, patterns: Sequence[str], mode: str = "suffix") -> str | None:
    """The first pattern `sni` matches, or None.

    * ``exact``: the name itself;
    * ``suffix``: the name or any subdomain, label-aligned (``t.co`` matches
      ``x.t.co`` but not ``microsoft.com``); a pattern that starts with ``*``
      matches any name that ends with the rest, label or not (``*t.co``
      matches ``microsoft.co``). These are the two rule shapes Wu et al.
      inferred for the Henan firewall and most of the GFW's (IEEE S&P 2025,
      Table IX: ``^(.*\\.)?keyword$`` and ``keyword$``);
    * ``substring``: anywhere in the name – the TSPU's March 2021 rule
      ``*t.co*`` that throttled microsoft.com and reddit.com (Xue et al., IMC 2021).
    """
    if not sni:
        return None
    name = sni.lower().rstrip(".")
    for pat in patterns:
        p = pat.lower().strip(".")
        if mode == "exact":
            hit = name == p
        elif mode == "suffix":
            if p.startswith("*"):
                hit = name.endswith(p.lstrip("*"))
            else:
                hit = name == p or name.endswith("." + p)
        elif mode == "substring":
            hit = p in name
        else:
            raise ValueError(f"unknown SNI match mode {mode!r}")
        if hit:
            return pat
    return None


def has_extensions(hello: Any, types: Sequence[int]) -> bool:
    """Whether the ClientHello carries every extension type in `types` (the TSPU's
    ECH rule wants encrypted_client_hello, 0xfe0d, beside the SNI)."""
    present = {t for t, _ in hello.extensions}
    return all(int(t) in present for t in types)


def sticky_draw(client: str, name: str, seed: int = 0) -> float:
    """A number in [0, 1) fixed for one (client address, name) pair: a censor that
    filters some pairs and not others, the same way each time (Iran 2026: 97.4 % of
    pairs gave the same result three times over; docs/censors/iran.md §3.3)."""
    import hashlib

    digest = hashlib.sha256(f"{seed}|{client}|{name.lower()}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def first_record_hello(data: bytes, complete: bool, prefix: bool) -> tlshello.ClientHello | None:
    """The ClientHello as a censor that does not reassemble TLS records reads it.

    Only the first record counts. ``data`` is what the censor has: the client's
    reassembled TCP stream (``complete`` False: a record not yet whole raises
    :class:`NeedMore`), or one TCP segment read alone (``complete`` True: a
    record the segment cuts short is read as far as it goes, as the Henan
    firewall does, which blocks a ClientHello split across TCP segments as long
    as the first segment holds the whole SNI extension: Wu et al., IEEE S&P
    2025, §4.3 "TCP segmentation" and §6). A hello longer than its record goes
    on in the next record: without TLS reassembly it is not parsed (None), or,
    with ``prefix``, read as far as the first record goes.
    """
    if len(data) < 5:
        if data[:1] not in (b"", b"\x16"):
            return None
        if complete:
            return None
        raise NeedMore
    rlen = int.from_bytes(data[3:5], "big")
    if data[0] != tlshello.HANDSHAKE or data[1] != 3 or not 0 < rlen <= 1 << 14:
        return None
    body = data[5:5 + rlen]
    if len(body) < rlen and not complete:
        if body[:1] not in (b"", b"\x01"):
            return None
        raise NeedMore
    if len(body) < 4 or body[0] != tlshello.CLIENT_HELLO:
        return None
    need = 4 + int.from_bytes(body[1:4], "big")
    if need > rlen:  # the hello goes on in a later record
        return tlshello.parse_client_hello_prefix(body) if prefix else None
    if len(body) < need:  # one segment that holds only the start of the record
        return tlshello.parse_client_hello_prefix(body)
    hello = tlshello.parse_client_hello_message(body[:need])
    if hello is not None:
        hello.record_version = int.from_bytes(data[1:3], "big")
    return hello
