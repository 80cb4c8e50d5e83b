"""The first packets of one flow, as the censor saw them.

A learning censor decides from a flow's first N packets. Its training data
comes from pcaps and its live input from NFQUEUE; both build a
:class:`FlowLog` through :meth:`FlowLog.add`, so a feature computed offline is
the feature the censor computes live. Payload bytes are kept up to
``data_cap`` per packet (entropy needs them; a pcap may hold fewer, so the
true length is recorded separately).
"""

from __future__ import annotations

from dataclasses import dataclass, field

UP, DOWN = 1, -1
"""Directions: client→server (from inside the censored network) and back."""

DEFAULT_DATA_CAP = 2048
"""Bytes kept per packet: Wang et al.'s entropy test reads at most 2048 bytes."""


@dataclass(frozen=True, slots=True)
class PacketView:
    """One packet: direction (±1), seconds since the flow's first packet, transport
    payload length on the wire, and the payload bytes kept (possibly fewer)."""

    direction: int
    ts: float
    length: int
    data: bytes


@dataclass
class FlowLog:
    """Up to `limit` packets of a flow, in arrival order."""

    limit: int
    data_cap: int = DEFAULT_DATA_CAP
    packets: list[PacketView] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.limit < 1:
            raise ValueError(f"limit must be at least 1, got {self.limit}")

    def __len__(self) -> int:
        return len(self.packets)

    @property
    def full(self) -> bool:
        return len(self.packets) >= self.limit

    def add(self, direction: int, ts: float, length: int, data: bytes = b"") -> None:
        """Record a packet; ignored once `limit` packets are in."""
        if direction not in (UP, DOWN):
            raise ValueError(f"direction must be +1 or -1, got {direction!r}")
        if length < 0 or len(data) > length:
            raise ValueError(f"bad length {length} for {len(data)} bytes of data")
        if len(self.packets) < self.limit:
            self.packets.append(PacketView(direction, float(ts), length,
                                           bytes(data[: self.data_cap])))

    def first_payload(self, direction: int = UP) -> PacketView | None:
        """The first packet in `direction` that carries payload, or None."""
        for p in self.packets:
            if p.direction == direction and p.length > 0:
                return p
        return None
