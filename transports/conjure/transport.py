"""The Conjure transport as ``ptlab pt`` finds it, registered as ``conjure``.

Client only: the server side is the station (``python -m
transports.conjure.station``), which answers for phantom addresses on a tap
and is no PT server, so :class:`Conjure` declares the client role alone and the
PT layer answers ``SMETHOD-ERROR`` for the other. Kept apart from
:mod:`.client` so every transport package has the same shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from transports.base import Transport

from .client import ConjureArgs, ConjureClientFactory


@dataclass(frozen=True)
class Conjure(Transport):
    """Client only: the server side is the station
    (``python -m transports.conjure.station``), which no PT server runs."""

    roles = frozenset({"client"})

    def client_factory(self, state_dir: Path | None,
                       args: Mapping[str, str]) -> ConjureClientFactory:
        return ConjureClientFactory(ConjureArgs.parse(args))


TRANSPORT = Conjure("conjure")
