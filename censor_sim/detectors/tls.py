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


def sni_matches(sni: str | None, patterns: Sequence[str], mode: str = "suffix") -> str | None:
    """The first pattern `sni` matches, or None.

    * ``exact``: the name itself;
    * ``suffix``: the name or any subdomain, label-aligned (``t.co`` matches
      ``x.t.co`` but not ``microsoft.com``);
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
