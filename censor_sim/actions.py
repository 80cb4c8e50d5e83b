"""What the censor does to a flow, as data, and how it is carried out.

Detectors and censor models decide; they return these plain records so they
stay testable without a network. The engine turns them into kernel state
(residual sets, conntrack marks for drops and policing) and the injector
crafts forged packets with scapy and sends them from the censor namespace.

Forged packets default to scapy's field values (window 8192, data offset 5,
TTL 64), which is what Geneva's lab censors send and what client-side
strategies such as ``[TCP:window:8192]-drop`` key on; profiles may override
them to imitate a particular censor's RST fingerprint.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any


@dataclass(frozen=True)
class InjectTcp:
    """A forged TCP segment (``count`` copies), e.g. a RST spoofed from the server."""

    src: str
    dst: str
    sport: int
    dport: int
    seq: int
    ack: int = 0
    flags: str = "R"
    window: int = 8192
    ttl: int = 64
    ip_id: int | None = None
    count: int = 1
    payload: bytes = b""
    df: bool = False  # IPv4 "don't fragment" (injectors differ: docs/censors/blocking.md §5)

    def to_json(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}  # shallow: per event
        d["payload"] = self.payload.hex()
        return d


@dataclass(frozen=True)
class InjectUdp:
    """A forged UDP datagram, e.g. a DNS answer racing the real one."""

    src: str
    dst: str
    sport: int
    dport: int
    payload: bytes
    ttl: int = 64
    count: int = 1

    def to_json(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}  # shallow: per event
        d["payload"] = self.payload.hex()
        return d


@dataclass
class Verdict:
    """The censor's answer for one queued packet.

    ``drop`` is honoured only in-path; ``flow`` tells the datapath what to do
    with the rest of the flow: None (keep inspecting), "accept" (offload to the
    kernel), "drop" (drop in the kernel), "throttle" (police in the kernel), or
    "freeze" (the kernel drops the server's packets past a byte count).
    """

    drop: bool = False
    inject: list[InjectTcp | InjectUdp] = field(default_factory=list)
    flow: str | None = None
    # This packet passes even though the residual entry its own verdict
    # created would drop it (Iran's filter drops "every packet after the first").
    passthrough: bool = False
    # The flow was decided on an earlier packet; this one only follows (a copy that
    # raced the decision to the tap, say): nothing new for the datapath to record.
    repeat: bool = False

    @classmethod
    def accept(cls) -> Verdict:
        return cls()
