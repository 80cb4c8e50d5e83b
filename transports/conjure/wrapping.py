"""How a connection to a phantom says which registration it belongs to.

``min`` (conjure ``pkg/transports/wrapping/min``): the client's first 32 bytes
are HMAC-SHA256(key = shared secret, message = ``"MinTrasportHMACString"``, the
typo included), the same on every reconnect. The station compares them with the
tags of the registrations for this (client, phantom, port).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from typing import Protocol

MIN_TAG_LENGTH = 32
MIN_HMAC_STRING = b"MinTrasportHMACString"


def min_tag(secret: bytes) -> bytes:
    return hmac.new(secret, MIN_HMAC_STRING, hashlib.sha256).digest()


class Candidate(Protocol):
    secret: bytes
    transport: str


NEED_MORE = object()


def identify(candidates: Sequence[Candidate], head: bytes) -> tuple[Candidate, int] | None | object:
    """The registration whose tag starts ``head`` and the tag length; None when no
    registration can match; :data:`NEED_MORE` while too few bytes arrived."""
    mins = [c for c in candidates if c.transport == "min"]
    if not mins:
        return None
    if len(head) < MIN_TAG_LENGTH:
        return NEED_MORE
    tag = head[:MIN_TAG_LENGTH]
    for c in mins:
        if hmac.compare_digest(min_tag(c.secret), tag):
            return c, MIN_TAG_LENGTH
    return None
