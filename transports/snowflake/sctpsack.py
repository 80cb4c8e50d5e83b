"""Delayed SACKs for aiortc's SCTP association (RFC 9260 §6.2).

aiortc answers every packet that carries DATA with a SACK of its own. On a
bulk transfer that doubles the datagrams the receiver sends, each one a DTLS
record and a ``sendto``: profiled on our proxy during an upload, half of its
38,000 sends were SACKs, and a send cost about 40 µs. RFC 9260 §6.2 lets a
receiver acknowledge every second packet, and a lone packet within 200 ms
(never over 500 ms), as pion does for Tor's proxy and client; out-of-order or
duplicate DATA must still be acknowledged at once, so the sender's fast
retransmit is not slowed.

aiortc has no switch for this, and the association is created inside
``RTCPeerConnection``. :func:`use_association_class` changes the class of a peer
connection's association, before any DATA moves, to :class:`DelayedSackSctp`:
a subclass that overrides only the private ``_send_sack`` hook and adds no
state aiortc reads. The tests pin the behaviour, so an aiortc release that
renames the hook fails them rather than silently changing the wire.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiortc.rtcsctptransport import RTCSctpTransport

SACK_EVERY = 2  # packets with DATA per SACK (RFC 9260 §6.2: at least every second)
SACK_DELAY_S = 0.2  # a lone packet's SACK waits at most this (RFC 9260 §6.2: < 0.5 s)


class DelayedSackSctp(RTCSctpTransport):
    """aiortc's association, acknowledging every second packet (see the module doc)."""

    _ptl_unacked = 0  # packets with DATA since the last SACK
    _ptl_timer: asyncio.TimerHandle | None = None

    async def _send_sack(self) -> None:
        self._ptl_unacked += 1
        urgent = bool(self._sack_misordered or self._sack_duplicates)
        if urgent or self._ptl_unacked >= SACK_EVERY:
            await self._sack_now()
            return
        # Leave _sack_needed set: the next packet's handling calls us again.
        if self._ptl_timer is None:
            self._ptl_timer = asyncio.get_running_loop().call_later(
                SACK_DELAY_S, self._sack_timer_fired)

    async def _sack_now(self) -> None:
        self._ptl_unacked = 0
        if self._ptl_timer is not None:
            self._ptl_timer.cancel()
            self._ptl_timer = None
        await super()._send_sack()

    def _sack_timer_fired(self) -> None:
        self._ptl_timer = None
        if self._sack_needed and self._association_state == self.State.ESTABLISHED:
            task = asyncio.ensure_future(self._sack_now())
            task.add_done_callback(_quiet)
        else:
            self._ptl_unacked = 0


def _quiet(task: asyncio.Task[Any]) -> None:
    # A SACK that cannot go out (the association closed under it) is not an error.
    if not task.cancelled():
        task.exception()


def use_association_class(pc: Any, cls: type[RTCSctpTransport]) -> bool:
    """Change ``pc``'s SCTP association to ``cls``, a subclass of its class that
    adds no state aiortc reads; False if ``pc`` has no association yet.

    Done before any DATA moves (right after the descriptions are set), since
    aiortc creates the association inside ``RTCPeerConnection``."""
    sctp = getattr(pc, "sctp", None)
    if sctp is None:
        return False
    if not isinstance(sctp, cls) and issubclass(cls, type(sctp)):
        sctp.__class__ = cls
    return isinstance(sctp, cls)
